"""TLS for the webhook where cert-manager is not installed: make, write and inject certificates."""
