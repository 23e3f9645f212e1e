"""Hardware, software and uncore counters through the kernel's perf events."""
