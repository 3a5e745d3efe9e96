// What users get from `import ContextStackPostgres` besides `Stack.addPostgresStore`: the
// public `PostgresError` of the client layer, to match the server's error codes. The store
// and the client themselves are `package`.
@_exported import _ContextStackPostgres
