# SPDX-License-Identifier: Apache-2.0
"""What every probe is built from: the Probe classes and bcc loading (base),
what a probe declares (contract), its workload and the kernel's count it must
agree with (exercise), maps read with bpf(2) (bpf_maps) and the in-kernel
log2 latency layout (histogram). The probes themselves are in nttrace.probes;
nothing here names one."""
