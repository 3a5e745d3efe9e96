// What users get from `import ContextStack` besides this module's own API: the public types
// of the layers below it — `Value` and `MatchOptions` (core); `SQLiteError` (SQLite layer);
// the model, predicates, fetch options, `MergePolicy`, `SaveError` and `StoreError` (model,
// the same on every store). Everything else in those targets is `package`: visible to the
// other targets of this package, never to users. See Docs/Architecture.md.
@_exported import _ContextStackCore
@_exported import _ContextStackModel
@_exported import _ContextStackSQLite
@_exported import _ContextStackSQLiteStore
