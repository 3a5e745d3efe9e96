// What users get from `import ContextStack` besides this module's own API: `Value` and
// `MatchOptions` (from the core) and `SQLiteError` (from the SQLite layer). Everything else in
// those targets is `package`: visible to the other targets of this package, never to users.
@_exported import _ContextStackCore
@_exported import _ContextStackSQLite
