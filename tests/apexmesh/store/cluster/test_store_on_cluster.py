"""The store's tests on a real Redis Cluster (fixtures in this directory's conftest)."""

from __future__ import annotations

from tests.apexmesh.store.test_access_cache import *  # noqa: F403
from tests.apexmesh.store.test_access_entries import *  # noqa: F403
from tests.apexmesh.store.test_held import *  # noqa: F403
from tests.apexmesh.store.test_hops import *  # noqa: F403
from tests.apexmesh.store.test_presence_store import *  # noqa: F403
from tests.apexmesh.store.test_pubsub_cache import *  # noqa: F403
from tests.apexmesh.store.test_pubsub_content_store import *  # noqa: F403
from tests.apexmesh.store.test_pubsub_leader import *  # noqa: F403
from tests.apexmesh.store.test_pubsub_snapshot import *  # noqa: F403
from tests.apexmesh.store.test_pubsub_store import *  # noqa: F403
from tests.apexmesh.store.test_robust_store import *  # noqa: F403
from tests.apexmesh.store.test_store_attachments import *  # noqa: F403
