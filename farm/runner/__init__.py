"""A run: the loop on the driver, the job that runs on a device, and its progress stream."""
