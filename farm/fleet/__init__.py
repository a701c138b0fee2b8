"""The fleet: starting and joining Ray nodes, the devices they advertise, their health, and
shipping the tree to them."""
