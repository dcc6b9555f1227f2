"""What the broker shows about itself: metrics.py (/metrics, /status, /served), exporter.py (the
rocketmq-exporter's names), stats.py and stats_service.py (4.9's statistics), runtime_info.py
(GET_BROKER_RUNTIME_INFO's table), served.py (the pulls this node answered)."""
