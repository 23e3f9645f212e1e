"""What the running kernel (or a captured sysroot) is: BTF, enums and offsets, tracefs formats, the machine."""
