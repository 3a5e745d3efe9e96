import FluentKit
import FluentPostgresDriver
import Foundation
import Logging
import NIOCore
import NIOPosix

// The PostgreSQL peer: Fluent (fluent-kit 1.57 with fluent-postgres-driver 2.14), used as a
// Vapor app uses it — a `Model` class with property wrappers, queries through
// `Model.query(on:)`, writes through `create`, `update` and a transaction — outside Vapor, with
// the same event loop group and thread pool Vapor would give it. It works in a schema of its
// own (`bench_fluent`), on the same `Item` table.

/// The `Item` row as a Fluent model.
final class FluentItem: Model, @unchecked Sendable {
    // @unchecked Sendable: Fluent's models are classes with property wrappers that Fluent
    // itself declares @unchecked Sendable; each instance is used by one task at a time here.
    static let schema = "Item"
    static let space: String? = "bench_fluent"

    @ID(custom: "Z_PK", generatedBy: .user) var id: Int64?
    @Field(key: "category") var category: Int
    @Field(key: "quantity") var quantity: Int
    @Field(key: "rank") var rank: Int
    @Field(key: "price") var price: Double
    @Field(key: "score") var score: Double
    @Field(key: "weight") var weight: Double
    @Field(key: "name") var name: String
    @Field(key: "code") var code: String
    @OptionalField(key: "note") var note: String?

    init() {}

    init(_ seed: RawItem, id: Int64) {
        self.id = id
        category = seed.category
        quantity = seed.quantity
        rank = seed.rank
        price = seed.price
        score = seed.score
        weight = seed.weight
        name = seed.name
        code = seed.code
        note = seed.note
    }
}

/// Fluent's databases, set up as Vapor sets them up.
final class FluentPeer: @unchecked Sendable {
    // @unchecked Sendable: `databases` is Fluent's own thread-safe registry; `shutdown` runs once.
    let databases: Databases
    let database: any Database

    init(url: String) throws {
        var configuration = try SQLPostgresConfiguration(url: url)
        configuration.searchPath = ["bench_fluent"]
        databases = Databases(threadPool: NIOThreadPool.singleton, on: MultiThreadedEventLoopGroup.singleton)
        databases.use(.postgres(configuration: configuration), as: .psql)
        database = databases.database(.psql, logger: Logger(label: "bench.fluent"), on: MultiThreadedEventLoopGroup.singleton.any())!
    }

    func shutdown() async {
        await databases.shutdownAsync()
    }

    /// Every seed in one transaction, in batch inserts of 5,000 rows (PostgreSQL binds at most
    /// 65,535 values a statement): the fastest way Fluent's documentation offers.
    func insert(_ seeds: [RawItem]) async throws {
        try await database.transaction { database in
            var start = 0
            while start < seeds.count {
                let end = min(start + 5000, seeds.count)
                let models = (start..<end).map { FluentItem(seeds[$0], id: Int64($0 + 1)) }
                try await models.create(on: database)
                start = end
            }
        }
    }

    func fetchAll() async throws -> [FluentItem] {
        try await FluentItem.query(on: database).all()
    }

    /// A read-modify-write of one row: `find`, change, `update`, each on its own (autocommit).
    func readModifyWrite(key: Int64) async throws {
        guard let item = try await FluentItem.find(key, on: database) else { throw BenchError("fluent: no item \(key)") }
        item.score += 1
        try await item.update(on: database)
    }
}
