"""What the running kernel (or a captured sysroot) is: BTF, enums and offsets, tracefs formats, the machine."""
import mmap

PAGE = mmap.PAGESIZE     # the running kernel's page size, in bytes
