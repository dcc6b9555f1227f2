"""Client-facing request processors of the broker, one family of request codes per module.

Each module's processors class answers its codes and installs them with ``register(registry)`` into a
remoting ``ProcessorRegistry``; the state they read and change lives in rmqha/broker/managers/ (topics,
subscription groups, consumer offsets, clients) and rmqha/broker/store/.
`rmqha.broker.server.BrokerServer` builds them all and wires them to one listening port.
"""
