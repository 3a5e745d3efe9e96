import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
@testable import _ContextStackPostgresStore
import Foundation
import Testing

/// Change sets written into the PostgreSQL store's tables: rows, sub-entity codes, join pairs
/// and row versions, one transaction per save, all or nothing.
@Suite(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server: see PostgresServer"))
struct PostgresWriterTests {
    let tables: PostgresTables
    var connection: PostgresConnection { tables.connection }
    var graph: ModelGraph { tables.graph }

    init() throws { tables = try PostgresTables([Person.self, Pet.self, Article.self, Tag.self, Staff.self, Engineer.self, Manager.self, Team.self]) }

    func id(_ type: ManagedObject.Type, _ key: Int64) -> ObjectID {
        ObjectID(rootEntity: graph.entity(for: type).rootDescription, primaryKey: key)
    }

    func slot(_ type: ManagedObject.Type, _ name: String) -> Int {
        graph.entity(for: type).properties.firstIndex { $0.name == name }!
    }

    /// A new row of `type` with its defaults and `values` by property name.
    func insert(_ type: ManagedObject.Type, _ key: Int64, _ values: [String: Value]) -> (id: ObjectID, row: ObjectRow) {
        let entity = graph.entity(for: type)
        var row = ObjectRow(entity: entity, values: entity.defaults)
        for (name, value) in values { row.values[slot(type, name)] = value }
        return (id(type, key), row)
    }

    func update(_ type: ManagedObject.Type, _ key: Int64, _ values: [String: Value]) -> ChangeSet.RowUpdate {
        let names = values.keys.sorted()
        return ChangeSet.RowUpdate(id: id(type, key), entity: graph.entity(for: type), slots: names.map { slot(type, $0) }, values: names.map { values[$0]! })
    }

    func scalar(_ sql: String, _ arguments: [Value] = []) throws -> Value { try connection.scalar(sql, arguments) }

    @Test func rowsCodesPairsAndVersionsAreWritten() throws {
        let tags = graph.entity(for: Article.self).properties.first { $0.name == "tags" }!
        var first = ChangeSet()
        first.inserts = [insert(Person.self, 1, ["name": "Monk", "age": 61, "email": "monk@example.org"]),
                         insert(Engineer.self, 7, ["name": "Ada", "language": "Swift"]),
                         insert(Article.self, 1, ["title": "On monks"]), insert(Tag.self, 1, ["name": "faith"])]
        first.links = [(tags.linkKey(tags.joinTable!, owner: 1, member: 1), true)]
        try PostgresWriter.save([first], on: connection)
        #expect(try scalar("SELECT name FROM \"Person\" WHERE \"Z_PK\" = 1") == .text("Monk"))
        #expect(try scalar("SELECT \"Z_VERSION\" FROM \"Person\" WHERE \"Z_PK\" = 1") == .integer(1))
        #expect(try scalar("SELECT \"Z_ENT\" FROM \"Staff\" WHERE \"Z_PK\" = 7") == .integer(graph.entity(for: Engineer.self).entityCode))
        #expect(try scalar("SELECT count(*) FROM \(tags.joinTable!.quotedName)") == .integer(1))

        var second = ChangeSet()
        second.updates = [update(Person.self, 1, ["age": 62])]
        second.links = [(tags.linkKey(tags.joinTable!, owner: 1, member: 1), true)]  // already there: nothing happens
        var third = ChangeSet()
        third.updates = [update(Person.self, 1, ["location": "Sea"])]
        try PostgresWriter.save([second, third], on: connection)
        #expect(try scalar("SELECT age FROM \"Person\" WHERE \"Z_PK\" = 1") == .integer(62))
        #expect(try scalar("SELECT \"Z_VERSION\" FROM \"Person\" WHERE \"Z_PK\" = 1") == .integer(3), "one more per update")
        #expect(try scalar("SELECT count(*) FROM \(tags.joinTable!.quotedName)") == .integer(1))

        var fourth = ChangeSet()
        fourth.deletes = [(id(Article.self, 1), graph.entity(for: Article.self))]
        // As a context's delete makes it: the pairs it knew removed. The store's writer removes
        // the others after the commit's statements (`keepReferencesWhole`, ConcurrentDeleteTests).
        fourth.links = [(tags.linkKey(tags.joinTable!, owner: 1, member: 1), false)]
        try PostgresWriter.save([fourth], on: connection)
        #expect(try scalar("SELECT count(*) FROM \"Article\"") == .integer(0))
        #expect(try scalar("SELECT count(*) FROM \(tags.joinTable!.quotedName)") == .integer(0), "a deleted object's pairs go with it")
    }

    /// Inserts go out several rows a statement (512, 64, 8, 1 at a time), runs of one entity
    /// together: every row arrives with its own values and entity code, however the runs and
    /// sizes fall.
    @Test func manyRowsGoOutInFewStatementsAndArriveWhole() throws {
        var changes = ChangeSet()
        for key in 1...1_100 { changes.inserts.append(insert(Pet.self, Int64(key), ["name": .text("pet \(key)"), "age": .integer(Int64(key))])) }
        for key in 1...21 {
            changes.inserts.append(insert(key.isMultiple(of: 2) ? Engineer.self : Manager.self, Int64(key), ["name": .text("staff \(key)")]))
        }
        let statements = Locked<[String]>([])
        let tracer = StatementTracer()
        tracer.set { sql in statements.withLock { $0.append(sql) } }
        connection.tracer = tracer
        try PostgresWriter.save([changes], on: connection)
        connection.tracer = nil
        let inserts = statements.withLock { $0 }.filter { $0.hasPrefix("INSERT") }
        // 1,100 pets: 2 × 512 + 64 + 8 + 4 × 1; the staff alternate entities: 21 runs of one.
        #expect(inserts.count == 2 + 1 + 1 + 4 + 21)
        #expect(try scalar("SELECT count(*) FROM \"Pet\"") == .integer(1_100))
        #expect(try scalar("SELECT count(*) FROM \"Pet\" WHERE name = 'pet ' || age::text") == .integer(1_100))
        let engineer = graph.entity(for: Engineer.self).entityCode
        #expect(try scalar("SELECT count(*) FROM \"Staff\" WHERE \"Z_ENT\" = ? AND \"Z_PK\" % 2 = 0", [.integer(engineer)]) == .integer(10))
        #expect(try scalar("SELECT count(*) FROM \"Staff\"") == .integer(21))
    }

    @Test func aSaveIsWholeOrAbsent() throws {
        var setup = ChangeSet()
        setup.inserts = [insert(Person.self, 1, ["name": "Monk", "email": "monk@example.org"])]
        try PostgresWriter.save([setup], on: connection)
        var good = ChangeSet()
        good.updates = [update(Person.self, 1, ["age": 70])]
        good.inserts = [insert(Pet.self, 1, ["name": "Rex"])]
        var bad = ChangeSet()
        bad.inserts = [insert(Person.self, 2, ["name": "Copy", "email": "monk@example.org"])]
        let error = try #require(throws: PostgresError.self) { try PostgresWriter.save([good, bad], on: connection) }
        #expect(error.code == .uniqueViolation)
        #expect(!connection.isInTransaction)
        #expect(try scalar("SELECT age FROM \"Person\" WHERE \"Z_PK\" = 1") == .integer(0))
        #expect(try scalar("SELECT \"Z_VERSION\" FROM \"Person\" WHERE \"Z_PK\" = 1") == .integer(1))
        #expect(try scalar("SELECT count(*) FROM \"Pet\"") == .integer(0))
        #expect(try scalar("SELECT count(*) FROM \"Person\"") == .integer(1))
    }

    @Test func rowsOfOneCommitMayTradeUniqueValues() throws {
        var setup = ChangeSet()
        setup.inserts = [insert(Person.self, 1, ["name": "A", "email": "a@example.org"]), insert(Person.self, 2, ["name": "B", "email": "b@example.org"])]
        try PostgresWriter.save([setup], on: connection)
        var swap = ChangeSet()
        swap.updates = [update(Person.self, 1, ["email": "b@example.org"]), update(Person.self, 2, ["email": "a@example.org"])]
        try PostgresWriter.save([swap], on: connection)
        #expect(try scalar("SELECT email FROM \"Person\" WHERE \"Z_PK\" = 1") == .text("b@example.org"))
        #expect(try scalar("SELECT email FROM \"Person\" WHERE \"Z_PK\" = 2") == .text("a@example.org"))
    }
}
