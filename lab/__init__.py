"""The lab: Linux kernels built from Debian's source with a series applied as
posted, booted in a QEMU guest with an emulated NVDIMM and a CPU-less memory
node, where nttrace runs for real; and the A/B of two kernels over several
interleaved boots (`python3 -m lab.ab`). Run from the checkout (README.md)."""
