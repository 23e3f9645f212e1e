# SPDX-License-Identifier: Apache-2.0
"""`nttrace validate`: the check catalog, its runs, their reports and evidence, and the textfile output.
The A/B of two sides of runs (`--baseline/--current`) is nttrace.ab's."""
