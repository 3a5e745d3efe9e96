import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

extension MainContext {
    /// Aggregate rows: selected keys and aggregates, grouped, filtered and ordered in SQL.
    ///
    /// For example:
    ///
    /// ```swift
    /// let rows = try world.query(Person.self, .select("location") | .average("age", alias: "avgAge"),
    ///                            %"age" > 10, orderBy: .descending("avgAge"),
    ///                            groupBy: %"location", having: %"avgAge" > 20)
    /// // SELECT t0."location" AS "location", avg(t0."age") AS "avgAge" FROM "Person" AS t0
    /// //   WHERE t0."age" > ? GROUP BY t0."location" HAVING avg(t0."age") > ? ORDER BY "avgAge" DESC
    /// rows.first?["avgAge"]
    /// ```
    ///
    /// Queries read the last committed state: every commit made before the call (waited for
    /// if it is still on its way to SQLite), not an update's pending changes, and — for a main
    /// context that does not merge — not its pinned view.
    ///
    /// - Throws: `QueryError` for an unknown key or alias, or an aggregate of a non-number.
    public func query<T: ManagedObject>(_ type: T.Type, _ select: Select, _ condition: Condition? = nil,
                                        orderBy: OrderBy? = nil, groupBy: (any KeyListConvertible)? = nil,
                                        having: Condition? = nil, options: FetchOptions = FetchOptions()) throws -> [Row] {
        try core.query(type, select, condition, orderBy: orderBy, groupBy: groupBy?.keyList, having: having, options: options)
    }

    /// The first value of the first row of a query, or `.null` when there is no row.
    ///
    /// For example: `try world.queryValue(Person.self, .average("age"))`.
    public func queryValue<T: ManagedObject>(_ type: T.Type, _ select: Select, _ condition: Condition? = nil) throws -> Value {
        try core.query(type, select, condition, orderBy: nil, groupBy: nil, having: nil, options: FetchOptions()).first?.values.first ?? .null
    }
}

extension Update {
    /// Aggregate rows, as `MainContext.query`: the last committed state, not this update's
    /// pending changes.
    public func query<T: ManagedObject>(_ type: T.Type, _ select: Select, _ condition: Condition? = nil,
                                        orderBy: OrderBy? = nil, groupBy: (any KeyListConvertible)? = nil,
                                        having: Condition? = nil, options: FetchOptions = FetchOptions()) throws -> [Row] {
        try context.core.query(type, select, condition, orderBy: orderBy, groupBy: groupBy?.keyList, having: having, options: options)
    }

    /// The first value of the first row of a query, or `.null` when there is no row.
    public func queryValue<T: ManagedObject>(_ type: T.Type, _ select: Select, _ condition: Condition? = nil) throws -> Value {
        try context.core.query(type, select, condition, orderBy: nil, groupBy: nil, having: nil, options: FetchOptions()).first?.values.first ?? .null
    }
}
