import PostgresQueue

/// Runs the stores' hot statements (the device `PUT`, the sign-in lookup, the device sync, the
/// send path, webhook deliveries) as named prepared statements: PostgresNIO parses and plans
/// each once per connection, where an unnamed statement is parsed and planned at every execution. With
/// prepared statements off (``StorageConfiguration/preparedStatements``, for a transaction
/// pooler such as PgBouncer before 1.21) the same SQL and bindings run unnamed. The queue's
/// runner, so the stores and the queue's own statements follow the same setting the same way.
typealias StatementRunner = PreparedStatementRunner
