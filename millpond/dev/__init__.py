"""Things for trying millpond and testing it, not for production: sample landing data, a local Kafka broker
(kafka_broker.py) and a local S3 server (s3_server.py, s3proxy), each stopped through process_group.py."""
