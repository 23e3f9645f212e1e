# SPDX-License-Identifier: Apache-2.0
"""`nttrace validate`: the check catalog, its runs, their reports, the A/B of two, and the textfile output."""
