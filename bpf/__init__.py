"""BPF C programs, compiled by bcc at run time. `source(name)` reads one."""
from importlib import resources


def source(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text()
