"""How processes connect over gRPC, whatever they say: keepalive options, mutual TLS with
Kafka's ``ssl.*`` properties, and the fetch session stream a follower or consumer keeps
open across fetches."""
