# Check the spawner and quota settings and the whole profile_list now, while
# the hub starts, instead of at some user's first spawn: a bad profile or
# setting stops the hub with a message that names the profile slug (or the
# setting) and the bad value. A VM profile's golden image without a version
# in its name (<family>-<YYYY>-<MM>) is logged, or stops the hub with
# c.GoldenImages.require_versioned. Then bring the quota ledger's database to
# the newest schema, so no user's first start runs a migration.
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.services import upgrade_database
from workspacespawner.spawner import check_hub_config

check_hub_config(c)
WorkspaceQuota(config=c)
upgrade_database(c)
