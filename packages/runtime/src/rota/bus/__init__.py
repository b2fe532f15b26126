"""NATS JetStream plumbing: broker, streams, dedup publishing, and the transactional outbox."""
