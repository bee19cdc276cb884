"""View definitions: check a view's SQL against the sources' schemas and cut it into site queries.

The analysis runs as ordered steps: parse -> bind tables -> bind columns -> choose keys
(`binding`) -> decompose into site queries and the assembly (`decomposition`). Its result
is a `ViewDef` (`model`), which the catalog stores as JSON. A table view (`table_views`)
is analyzed as the SELECT of every column of its table.
"""

from deltasieve_protocol.schema import ColumnInfo, SourceSchema, TableInfo, schema_to_json
from warehouse.viewdef.binding import VIEW_DIALECT, VIEW_FORM, referenced_sources
from warehouse.viewdef.cross_site import CROSS_SITE_HELP
from warehouse.viewdef.decomposition import ASSEMBLY_DIALECT, analyze_view, site_table
from warehouse.viewdef.model import SiteQuery, UnknownSourceError, ViewDef, ViewDefinitionError
from warehouse.viewdef.table_views import analyze_table_view, table_source, table_view_key, table_view_sql

__all__ = [
    "ASSEMBLY_DIALECT",
    "CROSS_SITE_HELP",
    "VIEW_DIALECT",
    "VIEW_FORM",
    "ColumnInfo",
    "SiteQuery",
    "SourceSchema",
    "TableInfo",
    "UnknownSourceError",
    "ViewDef",
    "ViewDefinitionError",
    "analyze_table_view",
    "analyze_view",
    "referenced_sources",
    "schema_to_json",
    "site_table",
    "table_source",
    "table_view_key",
    "table_view_sql",
]
