"""GPU queues (issue #41): which groups wait in which line for which GPUs, and the Kueue objects that keep it."""
