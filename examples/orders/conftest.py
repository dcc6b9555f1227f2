# Nothing is needed here for the fixtures: the plugin comes with the rocketmq-ha-refcluster package (a
# pytest11 entry point). This file only puts this folder on sys.path, so the tests import `orders`
# however pytest is started (from here, or from the repository root by `make test`).
