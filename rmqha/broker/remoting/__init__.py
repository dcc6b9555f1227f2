"""RocketMQ remoting protocol: codes, commands, frame codec and Twisted wrappers."""
