"""Client-facing request processors of the broker, one family of request codes per module.

Each module's processors class (a ``Processors``, rmqha/broker/remoting/handlers.py) marks the method that
answers each code with ``@handles(RequestCode.X)``, and ``register(registry)`` installs them into a
remoting ``ProcessorRegistry``; the state they read and change lives in rmqha/broker/managers/ (topics,
subscription groups, consumer offsets, clients) and rmqha/broker/store/.
`rmqha.broker.server.BrokerServer` builds them all and wires them to one listening port.
"""
