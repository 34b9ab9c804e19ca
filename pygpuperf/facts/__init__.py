"""What the machine is: the device and host, their caches, NVML's facts and links, and the vendor
datasheets and theoretical peaks. Reads the system; measures nothing."""
