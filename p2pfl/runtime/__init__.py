"""What every run shares: devices, failure handling, the run folder, the manifest, progress and the round loop."""
