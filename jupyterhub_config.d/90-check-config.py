# Check the spawner settings and the whole profile_list now, while the hub
# starts, instead of at some user's first spawn: a bad profile stops the hub
# with a message that names the profile slug and the field.
from workspacespawner.spawner import check_hub_config

check_hub_config(c)
