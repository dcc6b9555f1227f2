"""A RocketMQ 5.x gRPC proxy in cluster mode (apache.rocketmq.v2.MessagingService, rocketmq-apis v2.1.2)
in front of this project's name server and brokers, which it talks to over remoting. README.md here
has the RPC table and what is served."""
