// SPDX-License-Identifier: Apache-2.0
/*
 * The guest's side of the traffic plugin's windows: a 7-byte NOP
 * (`nopl disp32(%rax)`, 0F 1F 80 + disp32) whose displacement the plugin
 * reads when it translates the instruction (model.h: TM_MARKER_*). Executing
 * one changes nothing in the guest, with or without the plugin.
 */
#ifndef NTTRACE_TRAFFIC_WINDOW_H
#define NTTRACE_TRAFFIC_WINDOW_H

#define TRAFFIC_WINDOW_OPEN() __asm__ volatile(".byte 0x0f,0x1f,0x80,0x01,0x00,0x54,0x4e" ::: "memory")
#define TRAFFIC_WINDOW_CLOSE() __asm__ volatile(".byte 0x0f,0x1f,0x80,0x02,0x00,0x54,0x4e" ::: "memory")

#endif
