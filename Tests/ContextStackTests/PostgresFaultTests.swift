import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
@testable import _ContextStackPostgresStore
import Foundation
import Testing

/// A PostgreSQL server that stops dead (`pg_ctl stop -m immediate`) under the client: what was
/// committed is there after the restart, what was not is gone whole, and the broken
/// connections say so with a connection-failure code. Runs on a cluster of its own.
@Suite(.enabled(if: DedicatedPostgresServer.isAvailable, "needs the PostgreSQL server binaries"))
struct PostgresFaultTests {
    @Test func aServerCrashKeepsCommittedSavesAndDropsTheOneInFlight() throws {
        let server = try DedicatedPostgresServer()
        let graph = try Model(Person.self, Pet.self).graph
        let setup = try PostgresConnection(PostgresSettings(url: server.url))
        _ = try PostgresSchemaInstaller.install(StoreSchema(graph: graph, configuration: nil), on: setup, autoMigrating: true)
        let person = graph.entity(for: Person.self)
        func insert(_ key: Int64, _ name: String) -> ChangeSet {
            var row = ObjectRow(entity: person, values: person.defaults)
            row.values[person.properties.firstIndex { $0.name == "name" }!] = .text(name)
            var changes = ChangeSet()
            changes.inserts = [(ObjectID(rootEntity: person.rootDescription, primaryKey: key), row)]
            return changes
        }
        try PostgresWriter.save([insert(1, "committed")], on: setup)

        // A save whose transaction is open when the server dies.
        let writer = try PostgresConnection(PostgresSettings(url: server.url))
        try writer.execute("BEGIN")
        try PostgresWriter.apply(insert(2, "in flight"), on: writer)
        try PostgresWriter.apply(insert(3, "in flight too"), on: writer)
        try server.cluster.crash()

        let error = try #require(throws: PostgresError.self) { try writer.execute("COMMIT") }
        #expect(error.code.isConnectionFailure, "\(error)")
        #expect(writer.isBroken)
        #expect(throws: PostgresError.self) { try PostgresWriter.save([insert(4, "after")], on: setup) }

        try server.cluster.start()
        let fresh = try PostgresConnection(PostgresSettings(url: server.url))
        var names: [String] = []
        try fresh.query("SELECT name FROM \"Person\" ORDER BY \"Z_PK\"") { names.append($0.value(0).stringValue ?? "?") }
        #expect(names == ["committed"], "the committed save survived; the one in flight is gone whole")
        try PostgresWriter.save([insert(2, "again")], on: fresh)
        #expect(try fresh.scalar("SELECT count(*) FROM \"Person\"") == .integer(2))
    }
}
