"""kind end-to-end: the chart on a real cluster, pods force-deleted mid-conversation."""
