"""Outputs of nttrace: the Prometheus collector and the vmstat exporter."""
