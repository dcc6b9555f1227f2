"""A small order service: OrderPublisher puts orders on the Orders topic, OrderProcessor handles them once."""

from .processor import OrderProcessor
from .publisher import OrderPublisher

__all__ = ["OrderPublisher", "OrderProcessor"]
