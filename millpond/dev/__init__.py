"""Things for trying millpond and testing it, not for production: sample landing data and a local Kafka broker."""
