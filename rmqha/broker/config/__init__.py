"""The broker's settings: properties.py reads broker.properties into BrokerConfig, policy.py says which
settings UPDATE_BROKER_CONFIG may change at run time."""
