"""The broker's state outside the message store, as 4.9's managers keep it: topics, subscription groups,
consumer offsets, clients, delay levels (schedule), registration with the name servers and a slave's
copy of its master's tables (slave_sync). Request handlers are in rmqha/broker/processors/."""
