import _ContextStackCore

/// Options of a fetch, joined with `|`: `.limit(100) | .offset(20) | .batch(500)`.
///
/// Where two options set the same thing, the right one wins; `.prefetch` lists add up, and
/// `.tweak` closures run in order, after everything else, on the finished `FetchRequest`.
public struct FetchOptions: Sendable {
    /// At most this many objects.
    public var limit: Int?
    /// Skip this many objects first.
    public var offset: Int?
    /// Rows that are equal in every selected value come once (aggregate queries).
    public var distinct = false

    var batchSize: Int?
    var prefetch: [String] = []
    var propertiesOnly: [String]?
    var includesSubEntities: Bool?
    var includesPendingChanges: Bool?
    var includesPropertyValues: Bool?
    var tweaks: [@Sendable (inout FetchRequest) -> Void] = []

    public init() {}

    private static func with(_ change: (inout FetchOptions) -> Void) -> FetchOptions {
        var options = FetchOptions()
        change(&options)
        return options
    }

    /// At most `count` objects.
    public static func limit(_ count: Int) -> FetchOptions { with { $0.limit = count } }

    /// Skip the first `count` objects.
    public static func offset(_ count: Int) -> FetchOptions { with { $0.offset = count } }

    /// Equal rows once. It shapes `query` rows; an object fetch never returns an object twice,
    /// so there it changes nothing.
    public static var distinct: FetchOptions { with { $0.distinct = true } }

    /// Objects load their values `count` at a time: the fetch reads only the matching IDs, and
    /// the first use of an object loads it with the rest of its batch in one statement.
    ///
    /// For example: `try world.fetchAll(Person.self, options: .batch(1000))`. To walk millions
    /// of objects with flat memory, use `fetchCursor`, which lets go of each batch as it moves on.
    public static func batch(_ count: Int) -> FetchOptions { with { $0.batchSize = count } }

    /// Loads these relationships with the fetch, so following them from the fetched objects
    /// runs no further statement: `.prefetch(["friend", "pets"])`.
    public static func prefetch(_ keys: [String]) -> FetchOptions { with { $0.prefetch = keys } }

    /// Loads only these attributes with the fetch; the others load on first use, for each
    /// object's batch (`.batch(n)`) or for the object alone.
    public static func propertiesOnly(_ keys: [String]) -> FetchOptions { with { $0.propertiesOnly = keys } }

    /// Only objects of the entity itself, not of its sub-entities.
    public static var noSubEntities: FetchOptions { with { $0.includesSubEntities = false } }

    /// Ignores the reading context's own uncommitted changes: objects match by their values
    /// below the context (an object created in this update is not found; one it changed matches
    /// by its saved values). The objects returned are still the context's own.
    public static var noPendingChanges: FetchOptions { with { $0.includesPendingChanges = false } }

    /// Returns faults: objects whose values load on first use (with their batch, `.batch(n)`,
    /// or alone). The fetch reads only the matching IDs.
    public static var noPropertyValues: FetchOptions { with { $0.includesPropertyValues = false } }

    /// Changes the request just before it runs.
    ///
    /// For example: `options: .tweak { request in request.limit = 3 }`.
    public static func tweak(_ change: @escaping @Sendable (inout FetchRequest) -> Void) -> FetchOptions {
        with { $0.tweaks = [change] }
    }

    /// Both options; where both set the same one, the right side wins.
    public static func | (lhs: FetchOptions, rhs: FetchOptions) -> FetchOptions {
        var options = lhs
        if let limit = rhs.limit { options.limit = limit }
        if let offset = rhs.offset { options.offset = offset }
        options.distinct = lhs.distinct || rhs.distinct
        if let batch = rhs.batchSize { options.batchSize = batch }
        options.prefetch += rhs.prefetch
        if let keys = rhs.propertiesOnly { options.propertiesOnly = keys }
        if let value = rhs.includesSubEntities { options.includesSubEntities = value }
        if let value = rhs.includesPendingChanges { options.includesPendingChanges = value }
        if let value = rhs.includesPropertyValues { options.includesPropertyValues = value }
        options.tweaks += rhs.tweaks
        return options
    }
}

/// A fetch as it will run: the condition, the order and every option, in one value that a
/// `.tweak { request in … }` option may change.
///
/// For example:
///
/// ```swift
/// let people = try world.fetchAll(Person.self, %"age" > 18, options: .tweak { request in
///     request.limit = 3
///     request.orderBy = .descending("age")
/// })
/// ```
public struct FetchRequest: Sendable {
    /// Which objects; `nil` for all.
    public var condition: Condition?
    /// Their order; `nil` for primary-key order.
    public var orderBy: OrderBy?
    /// At most this many objects (`nil`: no limit).
    public var limit: Int?
    /// Skip this many objects first.
    public var offset: Int = 0
    /// Load values this many objects at a time (`nil`: all with the fetch).
    public var batchSize: Int?
    /// Relationships loaded with the fetch.
    public var prefetch: [String] = []
    /// The only attributes loaded with the fetch (`nil`: all).
    public var propertiesOnly: [String]?
    /// Equal rows once (aggregate queries).
    public var distinct = false
    /// Whether objects of sub-entities are included (true by default).
    public var includesSubEntities = true
    /// Whether the context's own uncommitted changes count (true by default).
    public var includesPendingChanges = true
    /// Whether objects come with their values (true by default) or as faults.
    public var includesPropertyValues = true

    package init(condition: Condition?, orderBy: OrderBy?, options: FetchOptions) {
        self.condition = condition
        self.orderBy = orderBy
        limit = options.limit
        offset = options.offset ?? 0
        batchSize = options.batchSize
        prefetch = options.prefetch
        propertiesOnly = options.propertiesOnly
        distinct = options.distinct
        includesSubEntities = options.includesSubEntities ?? true
        includesPendingChanges = options.includesPendingChanges ?? true
        includesPropertyValues = options.includesPropertyValues ?? true
        for tweak in options.tweaks { tweak(&self) }
        // Negative windows mean nothing; treat them as empty and none. A batch size of zero or
        // less is no batching, as Core Data's `fetchBatchSize = 0` (it was batches of one: a
        // statement per object).
        if let limit { self.limit = max(0, limit) }
        offset = max(0, offset)
        if let batch = batchSize, batch <= 0 { batchSize = nil }
    }
}
