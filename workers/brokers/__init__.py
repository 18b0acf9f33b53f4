"""The brokers: Redis, RabbitMQ (quorum lanes, publisher confirms), the in-process memory broker;
kind priorities and routing."""
