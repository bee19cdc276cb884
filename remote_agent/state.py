"""The agent's state between requests."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace

from deltasieve_protocol.models import SiteSpec
from deltasieve_protocol.siterefs import SiteRefs
from remote_agent import change_tokens, policies
from remote_agent.adapters import Adapter, TableInfo, open_adapter
from remote_agent.column_types import read_as_asked
from remote_agent.metrics import AgentMetrics
from remote_agent.settings import AgentSettings, allowed_rule, named_schemas, parse_allow
from remote_agent.sitequery import ValidatedQuery, validate_site_query
from remote_agent.strategies.sketch import Reconciliations

#: Site queries kept validated (`AgentState.site_query`): about one per view of this source.
MAX_VALIDATED = 4_096


class AgentState:
    """What the app holds between requests: the adapter, the allow rules, the slot counter."""

    def __init__(self, settings: AgentSettings):
        self.settings = settings
        self.adapter: Adapter = open_adapter(
            settings.db_url,
            statement_timeout_s=settings.statement_timeout_s,
            arrow_reads=settings.arrow_reads,
            sqlite_arrow_reads=settings.sqlite_arrow_reads,
            cache_dir=settings.cache_dir,
        )
        self.allow = parse_allow(settings.allow)
        #: The agent's own column policies (--hash, --block): no view lifts them (policies.py).
        self.hash_columns = policies.parse_columns(settings.hash, "--hash")
        self.block_columns = policies.parse_columns(settings.block, "--block")
        #: What hashed columns are keyed with (AGENT_HASH_KEY); None: hashing is refused.
        self.hash_key = policies.encoded_key(settings.hash_key.get_secret_value() if settings.hash_key else None)
        #: the other schemas --allow names tables of, or None without --allow: every schema
        #: the login can read; SQLite and dump files have none (a rule with a dot names a
        #: table whose own name has one, as it always did)
        self.schemas: list[str] | None = (
            (named_schemas(self.allow) if self.allow else None) if self.adapter.schemas else []
        )
        self.slots = threading.BoundedSemaphore(settings.max_concurrent_extractions)
        #: Sketch exchanges between stages: a few per extraction slot.
        self.reconciliations = Reconciliations(limit=2 * settings.max_concurrent_extractions)
        #: The site queries last sent in full, by reference (deltasieve_protocol/siterefs.py).
        self.site_refs = SiteRefs()
        #: This agent's instance, drawn at its start: the prefix of its change tokens (change_tokens.py).
        self.instance = change_tokens.instance_id()
        #: What GET /metrics counts (metrics.py).
        self.metrics = AgentMetrics()
        #: Site queries validated before, by (sql, key, blocked): the query and the tables it
        #: read as they were then; reused while those tables are unchanged.
        self._validated: OrderedDict[tuple, tuple[ValidatedQuery, dict[str, TableInfo]]] = OrderedDict()
        self._validated_lock = threading.Lock()

    def exposed(self, names: Sequence[str] | None = None) -> dict[str, TableInfo]:
        """The tables (and columns) this agent lets the warehouse read; only those named
        `names` (that exist), if given."""
        tables = {}
        described = (
            self.adapter.describe(self.schemas) if names is None else self.adapter.describe_tables(names, self.schemas)
        )
        for table in described:
            allowed, cols = allowed_rule(self.allow, table.name, table.schema) if self.allow else (True, None)
            if not allowed:
                continue
            if cols is not None:
                table = replace(
                    table,
                    columns=tuple(c for c in table.columns if c.name in cols),
                    primary_key=table.primary_key if set(table.primary_key) <= cols else (),
                    unique_keys=tuple(u for u in table.unique_keys if set(u) <= cols),
                )
            tables[table.name] = policies.exposed_table(table, self.hash_columns, self.block_columns)
        return tables

    def adapter_for(self, site: SiteSpec) -> Adapter:
        """The adapter one request reads through: for a directory of dumps, each table's
        file fixed now (the dumps the site names, else the newest), for every read of the request."""
        return self.adapter.pinned(site.dumps)

    def site_query(self, site: SiteSpec, exposed: dict[str, TableInfo] | None = None) -> ValidatedQuery:
        """The warehouse's site query, checked against what this agent exposes (`exposed`, when
        read already) less what the view blocks, its columns carrying the policies the agent
        applies as it reads (policies.py)."""
        query = self._validated_query(site, exposed)
        return policies.with_policies(read_as_asked(self.adapter, query, site), site, self.hash_key)

    def _validated_query(self, site: SiteSpec, exposed: dict[str, TableInfo] | None) -> ValidatedQuery:
        """`validate_site_query` of the site, or its result kept from an earlier request
        when the tables it reads are exposed exactly as then: parsing and rendering take
        milliseconds a request, and describing every table of a database of thousands
        tens of them, where describing the few the query reads takes a fraction of one."""
        held = (site.sql, tuple(site.key), tuple(sorted(site.blocked or ())))
        with self._validated_lock:
            kept = self._validated.get(held)
        if kept is not None:
            query, tables = kept
            now = policies.without_blocked(
                {t: exposed[t] for t in query.tables if t in exposed}
                if exposed is not None
                else self.exposed(query.tables),
                site.blocked,
            )
            if now == tables:
                with self._validated_lock:
                    self._validated.move_to_end(held)
                return query
        readable = policies.without_blocked(self.exposed() if exposed is None else exposed, site.blocked)
        query = validate_site_query(site.sql, site.key, readable, self.adapter.dialect, self.adapter.key_order)
        with self._validated_lock:
            self._validated[held] = (query, {t: readable[t] for t in query.tables})
            while len(self._validated) > MAX_VALIDATED:
                self._validated.popitem(last=False)
        return query
