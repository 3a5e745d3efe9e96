@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import ContextStackPostgres
import Foundation
import Testing

@Entity final class Session: ManagedObject {
    var token: String = ""
    var hits: Int = 0
}

@Entity final class Bookmark: ManagedObject {
    var title: String = ""
    @Relationship var session: Session?
}

/// People and pets in a file, sessions in memory: DESIGN 3.1's configurations.
let splitModelTypes: [ManagedObject.Type] = [Person.self, Pet.self, Session.self]
/// Twelve entities, one configuration each: one more than a stack's stores can hold.
@Entity final class Part0: ManagedObject { var value: Int = 0 }
@Entity final class Part1: ManagedObject { var value: Int = 0 }
@Entity final class Part2: ManagedObject { var value: Int = 0 }
@Entity final class Part3: ManagedObject { var value: Int = 0 }
@Entity final class Part4: ManagedObject { var value: Int = 0 }
@Entity final class Part5: ManagedObject { var value: Int = 0 }
@Entity final class Part6: ManagedObject { var value: Int = 0 }
@Entity final class Part7: ManagedObject { var value: Int = 0 }
@Entity final class Part8: ManagedObject { var value: Int = 0 }
@Entity final class Part9: ManagedObject { var value: Int = 0 }
@Entity final class Part10: ManagedObject { var value: Int = 0 }
@Entity final class Part11: ManagedObject { var value: Int = 0 }
let partTypes: [ManagedObject.Type] = [Part0.self, Part1.self, Part2.self, Part3.self, Part4.self, Part5.self, Part6.self, Part7.self, Part8.self, Part9.self, Part10.self, Part11.self]

func splitModel() throws -> Model {
    try Model(splitModelTypes, configurations: ["Database": [Person.self, Pet.self], "InMemory": [Session.self]])
}

/// Where each configuration of the split model lives.
enum Split: String, CaseIterable, CustomStringConvertible, Sendable {
    /// People in a file, sessions in memory.
    case fileAndMemory
    /// Sessions in memory added first, then people in a file.
    case memoryThenFile
    /// Each configuration in a file of its own.
    case twoFiles
    /// Both configurations in one PostgreSQL database.
    case onePostgresDatabase
    var description: String { rawValue }

    /// The splits this machine can run.
    static let available = allCases.filter { $0 != .onePostgresDatabase || PostgresServer.isAvailable }

    func makeStore(_ rootContext: Stack.RootContext) throws -> TestStore {
        let schema = self == .onePostgresDatabase ? try TestSchema() : nil
        return try TestStore(rootContext: rootContext, model: splitModel(), schema: schema) { stack, directory in
            switch self {
            case .fileAndMemory:
                try stack.addDatabaseStore(at: directory.appendingPathComponent("people.sqlite"), configuration: "Database")
                try stack.addInMemoryStore(configuration: "InMemory")
            case .memoryThenFile:
                try stack.addInMemoryStore(configuration: "InMemory")
                try stack.addDatabaseStore(at: directory.appendingPathComponent("people.sqlite"), configuration: "Database")
            case .twoFiles:
                try stack.addDatabaseStore(at: directory.appendingPathComponent("people.sqlite"), configuration: "Database")
                try stack.addDatabaseStore(at: directory.appendingPathComponent("sessions.sqlite"), configuration: "InMemory")
            case .onePostgresDatabase:
                try stack.addPostgresStore(url: schema!.url, configuration: "Database")
                try stack.addPostgresStore(url: schema!.url, configuration: "InMemory")
            }
        }
    }
}

@Suite struct MultiStoreTests {
    @Test(arguments: Topology.allCases, Split.available) @MainActor
    func fetchesAndSavesReachEveryStore(topology: Topology, split: Split) async throws {
        let harness = try TopologyHarness(topology, makeStore: split.makeStore)
        try harness.update { update in
            let monk = try update.create(Person.self)
            monk.name = "Monk"
            let rex = try update.create(Pet.self)
            rex.name = "Rex"
            rex.owner = monk
            let session = try update.create(Session.self)
            session.token = "abc"
            try update.commit()
        }
        try await harness.stack.flush()
        try await harness.settle()
        #expect(try harness.world.fetch(Person.self, %"name" == "Monk")?.pets.map(\.name) == ["Rex"])
        #expect(try harness.world.fetch(Session.self, %"token" == "abc") != nil)
        try harness.update { update in
            let session = try #require(try update.fetch(Session.self))
            session.hits += 1
            try update.delete(try #require(try update.fetch(Pet.self)))
            try update.commit()
        }
        try await harness.stack.flush()
        try await harness.settle()
        #expect(try harness.world.fetch(Session.self)?.hits == 1)
        #expect(try harness.world.fetchCount(Pet.self) == 0)
        #expect(try harness.world.fetchCount(Person.self) == 1)
    }

    /// (SQLite's files; one PostgreSQL database's parts are PostgresStoreTests' business.)
    @Test(arguments: Split.available.filter { $0 != .onePostgresDatabase }) @MainActor
    func eachConfigurationIsWrittenToItsOwnStore(split: Split) async throws {
        let store = try split.makeStore(.shared)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Monk"
            try update.create(Session.self).token = "abc"
            try update.commit()
        }
        try await store.stack.flush()
        let directory = try #require(store.directory)
        let people = try Connection(path: directory.appendingPathComponent("people.sqlite").path)
        #expect(try people.scalar("SELECT count(*) FROM Person") == .integer(1))
        #expect(try people.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'Session'") == .integer(0))
        let sessionsFile = directory.appendingPathComponent("sessions.sqlite")
        if split == .twoFiles {
            let sessions = try Connection(path: sessionsFile.path)
            #expect(try sessions.scalar("SELECT token FROM Session") == .text("abc"))
            #expect(try sessions.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'Person'") == .integer(0))
        } else {
            #expect(!FileManager.default.fileExists(atPath: sessionsFile.path))
        }
        // Reopened, the file holds the people; the in-memory sessions are gone.
        let reopened = try Stack(model: splitModel())
        try reopened.addDatabaseStore(at: directory.appendingPathComponent("people.sqlite"), configuration: "Database")
        try reopened.addInMemoryStore(configuration: "InMemory")
        let again = try MainContext(stack: reopened)
        #expect(try again.fetchCount(Person.self) == 1)
        #expect(try again.fetchCount(Session.self) == 0)
    }

    /// Docs/Stores.md: a file store uses write-ahead logging with `synchronous=NORMAL` and a
    /// ten-second busy timeout, and so does a second file, attached to the writer's connection
    /// (`synchronous` is set per attached database; SQLite's default is `FULL`). Readers attach
    /// it read-only, where neither setting applies.
    @Test @MainActor func anAttachedFileIsWriteAheadLoggedAndSynchronousNormalToo() async throws {
        let store = try Split.twoFiles.makeStore(.none)
        try Context(stack: store.stack, updateTarget: .persistentStore).beginUpdateAndWait { update in
            try update.create(Person.self).name = "Monk"
            try update.create(Session.self).token = "abc"
            try update.commit()
        }
        let file = try #require(store.stack.store as? SQLiteStore)
        let settings = try file.writer.withLock { state in
            try ["main", "s1"].map { database in
                [try state.connection.scalar("PRAGMA \(database).journal_mode"), try state.connection.scalar("PRAGMA \(database).synchronous")]
            } + [[try state.connection.scalar("PRAGMA busy_timeout")]]
        }
        #expect(settings == [[.text("wal"), .integer(1)], [.text("wal"), .integer(1)], [.integer(10_000)]])
        #expect(try file.writer.withLock { try $0.connection.scalar("SELECT file FROM pragma_database_list WHERE name = 's1'").stringValue }?.hasSuffix("sessions.sqlite") == true)
    }

    /// Docs/Stores.md, "Several stores": SQLite commits a transaction over several files one
    /// file after the other in WAL mode, so a `COMMIT` that fails part-way — here the second
    /// file's log cannot grow (the child process limits file sizes, `RLIMIT_FSIZE`) — leaves the
    /// first file with its part of the commit, while the commit throws. Each file is whole on
    /// its own.
    @Test func aCommitOverTwoFilesWhoseCommitFailsPartWayKeepsTheFirstFilesPart() async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.path
        await #expect(processExitsWith: .success) { [path = path as String] in
            let directory = URL(fileURLWithPath: path)
            let stack = try Stack(model: splitModel(), rootContext: .none)
            try stack.addDatabaseStore(at: directory.appendingPathComponent("people.sqlite"), configuration: "Database")
            try stack.addDatabaseStore(at: directory.appendingPathComponent("sessions.sqlite"), configuration: "InMemory")
            let context = try Context(stack: stack)
            guard limitFileSizes(to: 256 << 10) else { exit(3) }
            do {
                // The sessions' pages (under a megabyte) stay in the page cache until COMMIT.
                try context.beginUpdateAndWait { update in
                    try update.create(Person.self).name = "Ann"
                    for index in 0..<300 { try update.create(Session.self).token = "\(index)" + String(repeating: "t", count: 3_000) }
                    try update.commit()
                }
                exit(2)
            } catch let error as SQLiteError where [.full, .ioError].contains(error.code.primary) {
                exit(0)
            } catch {
                exit(1)
            }
        }
        let people = try Connection(path: directory.appendingPathComponent("people.sqlite").path)
        let sessions = try Connection(path: directory.appendingPathComponent("sessions.sqlite").path)
        #expect(try people.rows("SELECT name FROM \"Person\"") == [[.text("Ann")]])
        #expect(try sessions.scalar("SELECT count(*) FROM \"Session\"") == .integer(0))
        #expect(try people.scalar("PRAGMA integrity_check") == .text("ok"))
        #expect(try sessions.scalar("PRAGMA integrity_check") == .text("ok"))
    }

    /// A stack with an in-memory store reads through its writer's connection (no other
    /// connection sees an in-memory database). Such a read is one snapshot of the files too:
    /// another process's commit between two of its statements does not show in the second.
    /// Before, the writer read in autocommit, each statement at its own moment.
    @Test(arguments: [Split.fileAndMemory, .memoryThenFile])
    func aReadThroughTheWriterIsOneSnapshotOfTheFiles(split: Split) throws {
        let store = try split.makeStore(.shared)
        let file = try #require(store.directory).appendingPathComponent("people.sqlite")
        let other = try Connection(path: file.path)
        var counts: [Value] = []
        try store.stack.sqliteStore.withReadSession(pin: nil, whileLocked: nil, shape: .statements) { session in
            counts.append(try session.connection.scalar("SELECT count(*) FROM \"Person\""))
            try other.execute("INSERT INTO \"Person\" (\"Z_PK\", \"name\") VALUES (1000, 'Cy')")
            counts.append(try session.connection.scalar("SELECT count(*) FROM \"Person\""))
        }
        #expect(counts == [.integer(0), .integer(0)])
        _ = try store.stack.sqliteStore.withCommittedView { _, reader in
            counts = [try reader.session.connection.scalar("SELECT count(*) FROM \"Person\"")]
            try other.execute("DELETE FROM \"Person\"")
            counts.append(try reader.session.connection.scalar("SELECT count(*) FROM \"Person\""))
        }
        #expect(counts == [.integer(1), .integer(1)])
        // The writer was left outside any transaction: commits go on.
        let context = try Context(stack: store.stack)
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Ann"
            try update.commit()
        }
        try store.stack.flushAndWait()
        #expect(try other.scalar("SELECT name FROM \"Person\"") == .text("Ann"))
    }

    /// SQLite attaches at most ten databases to a connection, so a stack holds at most eleven
    /// stores (Docs/Stores.md): the twelfth throws `.unsupported` before its file is made
    /// (it was made, tables and all, and then refused by SQLite), and the eleven go on working.
    @Test @MainActor func aStackHoldsElevenStoresAndRefusesATwelfth() throws {
        let configurations = Dictionary(uniqueKeysWithValues: partTypes.enumerated().map { ("c\($0.offset)", [$0.element]) })
        let store = try TestStore(model: Model(partTypes, configurations: configurations)) { stack, directory in
            for index in 0..<11 {
                try stack.addDatabaseStore(at: directory.appendingPathComponent("part\(index).sqlite"), configuration: "c\(index)")
            }
            let twelfth = directory.appendingPathComponent("part11.sqlite")
            let error = #expect(throws: StoreError.self) {
                try stack.addDatabaseStore(at: twelfth, configuration: "c11")
            }
            #expect(error?.code == .unsupported)
            #expect(error?.message.contains("A stack holds at most 11 SQLite stores") == true, "\(String(describing: error))")
            // Refused before the file is made.
            #expect(!FileManager.default.fileExists(atPath: twelfth.path))
        }
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Part0.self).value = 1
            try update.create(Part10.self).value = 10
            try update.commit()
        }
        try store.stack.flushAndWait()
        #expect(try world.fetchAll(Part10.self).map(\.value) == [10])
        #expect(try world.fetchCount(Part0.self) == 1)
    }

    /// Fetching an entity that no added store holds throws SQLite's own error (Docs/Stores.md,
    /// "Unknown names throw").
    @Test @MainActor func fetchingAnEntityNoAddedStoreHoldsThrows() throws {
        let store = try TestStore(model: splitModel()) { stack, directory in
            try stack.addDatabaseStore(at: directory.appendingPathComponent("people.sqlite"), configuration: "Database")
        }
        let world = try MainContext(stack: store.stack)
        let error = #expect(throws: SQLiteError.self) { _ = try world.fetchAll(Session.self) }
        #expect(error?.message.contains("no such table") == true, "\(String(describing: error))")
        #expect(try world.fetchCount(Person.self) == 0)
    }

    @Test func aRelationshipAcrossConfigurationsIsRejected() {
        #expect {
            try Model(Session.self, Bookmark.self, configurations: ["A": [Session.self], "B": [Bookmark.self]])
        } throws: { error in
            guard let error = error as? ModelError else { return false }
            return error.code == .relationshipAcrossConfigurations && error.message.contains("Bookmark.session")
        }
        // Within one configuration it is fine.
        #expect(throws: Never.self) { try Model(Session.self, Bookmark.self, configurations: ["A": [Session.self, Bookmark.self]]) }
    }

    @Test func aConfigurationHoldsWholeHierarchies() throws {
        let model = try Model(Staff.self, Engineer.self, Manager.self, Team.self, configurations: ["Work": [Engineer.self, Team.self]])
        #expect(model.graph.configurations["Work"] == ["Staff", "Engineer", "Manager", "Team"])
        // Listing the sub-entity without its relationship's destination is caught through the parent.
        #expect {
            try Model(Staff.self, Engineer.self, Team.self, configurations: ["Work": [Engineer.self]])
        } throws: { ($0 as? ModelError)?.code == .relationshipAcrossConfigurations }
    }

    @Test func theSameFileTwiceIsANoOpWithTheSameSettingsAndAnErrorWithOthers() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("store.sqlite")
        let stack = try Stack(model: splitModel())
        try stack.addDatabaseStore(at: url, configuration: "Database")
        try stack.addDatabaseStore(at: url, configuration: "Database")
        // Spelled another way, or through a symbolic link: the same file.
        try stack.addDatabaseStore(at: directory.appendingPathComponent("sub/../store.sqlite"), configuration: "Database")
        let link = directory.appendingPathComponent("link.sqlite")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: url)
        try stack.addDatabaseStore(at: link, configuration: "Database")
        #expect(stack.sqliteStore.parts.count == 1)
        #expect {
            try stack.addDatabaseStore(at: url, configuration: "Database", resetOnFailure: true)
        } throws: { ($0 as? StoreError)?.code == .alreadyAdded }
        #expect {
            try stack.addDatabaseStore(at: url, configuration: "InMemory")
        } throws: { ($0 as? StoreError)?.code == .alreadyAdded }
        #expect {
            try stack.addDatabaseStore(at: url, configuration: "Database", autoMigrating: false)
        } throws: { ($0 as? StoreError)?.code == .alreadyAdded }
    }

    @Test func configurationsMayNotOverlapOnOneStack() throws {
        let model = try Model([Person.self, Pet.self, Session.self],
                              configurations: ["Database": [Person.self, Pet.self], "Both": [Person.self, Pet.self, Session.self]])
        let stack = try Stack(model: model)
        try stack.addInMemoryStore(configuration: "Database")
        #expect {
            try stack.addInMemoryStore(configuration: "Both")
        } throws: { error in
            guard let error = error as? StoreError else { return false }
            return error.code == .alreadyAdded && error.message.contains("Person")
        }
        #expect {
            try stack.addInMemoryStore()
        } throws: { ($0 as? StoreError)?.code == .alreadyAdded }
    }

    @Test func creatingAnObjectOfAnEntityWithoutAStoreTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let stack = try Stack(model: splitModel(), rootContext: .none)
            try stack.addInMemoryStore(configuration: "Database")
            let context = try Context(stack: stack)
            // Fine: people have a store.
            try context.beginUpdateAndWait { update in _ = try update.create(Person.self) }
            // Sessions have none: add a store for "InMemory" first.
            try context.beginUpdateAndWait { update in _ = try update.create(Session.self) }
        }
        expectTrapMessage(result, contains: "Session is in no store of this stack", "addInMemoryStore(configuration:)")
    }

    @Test func eachFileMigratesItsOwnConfigurationOnly() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let gadgets = directory.appendingPathComponent("gadgets.sqlite")
        func open(_ model: Model) throws -> Context {
            let stack = try Stack(model: model, rootContext: .none)
            try stack.addDatabaseStore(at: gadgets, configuration: "Database")
            try stack.addInMemoryStore(configuration: "InMemory")
            return try Context(stack: stack)
        }
        let first = try open(Model(GadgetV1.self, Session.self, configurations: ["Database": [GadgetV1.self], "InMemory": [Session.self]]))
        try first.beginUpdateAndWait { update in
            try update.create(GadgetV1.self).serial = "S1"
            try update.create(Session.self).token = "t"
            try update.commit()
        }
        let db = try Connection(path: gadgets.path)
        let schema = try db.rows("SELECT name, sql FROM sqlite_master ORDER BY name")
        let hash = try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'hash'")

        // Another in-memory configuration: the file is not touched.
        let second = try open(Model(GadgetV1.self, Session.self, Bookmark.self,
                                    configurations: ["Database": [GadgetV1.self], "InMemory": [Session.self, Bookmark.self]]))
        #expect(try second.beginUpdateAndWait { try $0.fetch(GadgetV1.self)?.serial } == "S1")
        #expect(try db.rows("SELECT name, sql FROM sqlite_master ORDER BY name") == schema)
        #expect(try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'hash'") == hash)

        // A new version of the file's own configuration: migrated, data kept.
        let third = try open(Model(GadgetV2.self, Session.self, configurations: ["Database": [GadgetV2.self], "InMemory": [Session.self]]))
        try third.beginUpdateAndWait { update in
            let gadget = try #require(try update.fetch(GadgetV2.self))
            #expect(gadget.serial == "S1" && gadget.label == "plain")
            gadget.label = nil
            try update.commit()
        }
        #expect(try db.scalar("SELECT label FROM Gadget") == .null)
    }

    @Test func aStoreWithoutConfigurationIsTheOnlyStore() throws {
        let stack = try Stack(model: splitModel())
        try stack.addInMemoryStore()
        #expect {
            try stack.addInMemoryStore(configuration: "InMemory")
        } throws: { ($0 as? StoreError)?.code == .alreadyAdded }
    }
}
