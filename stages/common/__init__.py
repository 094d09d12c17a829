"""Libraries every stage shares: artifact store, configs, fingerprints, the stage runner."""
