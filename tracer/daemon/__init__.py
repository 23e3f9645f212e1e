# SPDX-License-Identifier: Apache-2.0
"""`nttrace daemon`: the Prometheus exporter service, its config, its loader process and its systemd side."""
