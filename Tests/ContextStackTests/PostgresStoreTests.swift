@testable import ContextStack
import ContextStackPostgres
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
import Foundation
import Testing

/// Adding PostgreSQL stores to a stack: what Docs/Postgres.md ("Set up") says is allowed and
/// what is refused. (Everything a store does once added is the behaviour suites' business: they
/// run on PostgreSQL too.)
@Suite(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server: see PostgresServer"))
struct PostgresStoreTests {
    @Test func configurationsShareOneDatabaseEachWithItsOwnDescription() throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        let stack = try Stack(model: splitModel())
        try stack.addPostgresStore(url: schema.url, configuration: "Database")
        try stack.addPostgresStore(url: schema.url, configuration: "InMemory")
        // The same again, with the same settings, is nothing.
        try stack.addPostgresStore(url: schema.url, configuration: "Database")
        let changed = try #require(throws: StoreError.self) {
            try stack.addPostgresStore(url: schema.url, configuration: "Database", autoMigrating: false)
        }
        #expect(changed.code == .alreadyAdded)
        let keys = try PostgresConnection(PostgresSettings(url: schema.url)).allRows("SELECT key FROM \"Z_METADATA\" ORDER BY key")
        #expect(keys == [[.text("format")], [.text("hash:Database")], [.text("hash:InMemory")], [.text("schema:Database")], [.text("schema:InMemory")]])

        // A second stack opening the same database finds both parts as they are.
        let again = try Stack(model: splitModel())
        try again.addPostgresStore(url: schema.url, configuration: "InMemory")
        try again.addPostgresStore(url: schema.url, configuration: "Database")
    }

    @Test func aStackKeepsItsPostgreSQLStoresInOneDatabaseAndDoesNotMixKinds() throws {
        let first = try TestSchema()
        let second = try TestSchema()
        defer { first.drop(); second.drop() }
        let stack = try Stack(model: splitModel())
        try stack.addPostgresStore(url: first.url, configuration: "Database")
        let elsewhere = try #require(throws: StoreError.self) {
            try stack.addPostgresStore(url: second.url, configuration: "InMemory")
        }
        #expect(elsewhere.code == .alreadyAdded)
        #expect(elsewhere.message.contains("one database"))
        let sqlite = try #require(throws: StoreError.self) { try stack.addInMemoryStore(configuration: "InMemory") }
        #expect(sqlite.code == .alreadyAdded)

        let local = try Stack(model: splitModel())
        try local.addInMemoryStore(configuration: "InMemory")
        let mixed = try #require(throws: StoreError.self) { try local.addPostgresStore(url: first.url, configuration: "Database") }
        #expect(mixed.code == .alreadyAdded)
    }

    @Test func aURLThatIsNotPostgreSQLsIsRefusedWithoutItsPassword() throws {
        let stack = try Stack(model: Model(Person.self, Pet.self))
        let error = try #require(throws: PostgresError.self) {
            try stack.addPostgresStore(url: URL(string: "mysql://app:hunter2@db/app")!)
        }
        #expect(error.code == .cannotConnect)
        #expect(!"\(error)".contains("hunter2"))
    }
}
