@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Files that are not good stores: each gives its documented `StoreError`, never a crash, and a
/// file ContextStack did not create is never changed.
/// Another model whose entity is named `Person`, for a store of the wrong model.
@Entity(name: "Person") final class OtherPerson: ManagedObject {
    var nickname: String = ""
}

@Suite struct BadFileTests {
    let directory: URL
    let url: URL

    init() throws {
        (directory, url) = try makeStoreLocation()
    }

    func cleanUp() { removeTemporaryDirectory(directory) }

    func open(resetOnFailure: Bool = false) throws -> Stack {
        let stack = try Stack(model: Model(Person.self, Pet.self))
        try stack.addDatabaseStore(at: url, resetOnFailure: resetOnFailure)
        return stack
    }

    /// A good store with a few hundred rows, so that it spans several pages.
    func writeGoodStore() throws {
        try writeStore([Person.self, Pet.self], at: url) { update in
            for index in 0..<300 {
                let person = try update.create(Person.self)
                person.name = String(repeating: "n", count: 100) + "\(index)"
            }
        }
    }

    func expectCode(_ code: StoreError.Code, resetOnFailure: Bool = false) {
        #expect {
            try open(resetOnFailure: resetOnFailure)
        } throws: { error in
            (error as? StoreError)?.code == code
        }
    }

    @Test(arguments: [
        Data("hello, this is a text file and not a database at all".utf8),
        Data(repeating: 0xAB, count: 8192),
        Data("SQLite format 3".utf8),  // shorter than a header
        Data("SQLite format 3\0".utf8) + Data(repeating: 0, count: 83),  // one byte short of a header
    ])
    func aFileThatIsNotSQLiteIsLeftUntouched(contents: Data) throws {
        defer { cleanUp() }
        try contents.write(to: url)
        expectCode(.notADatabase)
        expectCode(.notADatabase, resetOnFailure: true)
        #expect(FileManager.default.contents(atPath: url.path) == contents)
        #expect(!FileManager.default.fileExists(atPath: url.path + "-wal"))
    }

    /// A store of ContextStack's whose header lost SQLite's mark cannot be told from a file
    /// that is not a database: it is never reset (Docs/Stores.md, "Bad files").
    @Test func aStoreWhoseHeaderMarkIsDamagedIsLeftUntouched() throws {
        defer { cleanUp() }
        try writeGoodStore()
        var contents = try #require(FileManager.default.contents(atPath: url.path))
        contents.replaceSubrange(0..<6, with: Data("SQLITE".utf8))
        try contents.write(to: url)
        expectCode(.notADatabase)
        expectCode(.notADatabase, resetOnFailure: true)
        #expect(FileManager.default.contents(atPath: url.path) == contents)
    }

    /// Docs/Stores.md, "Bad files": bytes 16 to 99 of the header are SQLite's to judge. An
    /// invalid page size (bytes 16–17: 3) is refused as `.corrupt`, and `resetOnFailure` empties
    /// the store; the user version and the application ID (bytes 60–63 and 68–71), which SQLite
    /// does not interpret, change nothing: the store opens with its rows.
    @Test func headerFieldsAfterTheMarkAreSQLitesToJudge() throws {
        defer { cleanUp() }
        try writeGoodStore()
        let good = try #require(FileManager.default.contents(atPath: url.path))
        var versioned = good
        versioned.replaceSubrange(60..<64, with: Data([0x12, 0x34, 0x56, 0x78]))
        versioned.replaceSubrange(68..<72, with: Data([0x0B, 0xAD, 0xF0, 0x0D]))
        try versioned.write(to: url)
        do {
            let stack = try open()
            #expect(try Context(stack: stack, updateTarget: .persistentStore).beginUpdateAndWait { try $0.fetchCount(Person.self) } == 300)
        }
        #expect(!FileManager.default.fileExists(atPath: url.path + "-wal"), "the stack let the file go")

        var damaged = good
        damaged.replaceSubrange(16..<18, with: Data([0x00, 0x03]))
        try damaged.write(to: url)
        expectCode(.corrupt)
        let reset = try open(resetOnFailure: true)
        #expect(try Context(stack: reset, updateTarget: .persistentStore).beginUpdateAndWait { try $0.fetchCount(Person.self) } == 0)
    }

    @Test func someoneElsesDatabaseIsLeftUntouched() throws {
        defer { cleanUp() }
        do {
            let db = try Connection(path: url.path)
            try db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER); INSERT INTO accounts VALUES (1, 100)")
        }
        let before = FileManager.default.contents(atPath: url.path)
        expectCode(.foreignDatabase)
        expectCode(.foreignDatabase, resetOnFailure: true)
        let db = try Connection(path: url.path)
        #expect(try db.scalar("SELECT balance FROM accounts") == .integer(100))
        #expect(try db.scalar("PRAGMA journal_mode") == .text("delete"))
        #expect(FileManager.default.contents(atPath: url.path) == before)
    }

    /// Someone else's database whose schema this SQLite cannot parse (a newer SQLite's syntax,
    /// as a `STRICT` table is to one before 3.37; here an option no SQLite knows) is still
    /// someone else's: `.foreignDatabase`, untouched even with `resetOnFailure`. Before, SQLite's
    /// "malformed database schema" made it `.corrupt`, and `resetOnFailure` emptied it. A store
    /// of ContextStack's whose schema does not parse is damaged, and is reset as before.
    @Test func someoneElsesDatabaseWithASchemaThisSQLiteCannotParseIsLeftUntouched() throws {
        defer { cleanUp() }
        func garble(_ table: String) throws {
            let db = try Connection(path: url.path)
            try db.execute("PRAGMA writable_schema = ON")
            try db.execute("UPDATE sqlite_master SET sql = sql || ' FUTURE_OPTION' WHERE name = '\(table)'")
        }
        do {
            let db = try Connection(path: url.path)
            try db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER); INSERT INTO accounts VALUES (1, 100)")
        }
        try garble("accounts")
        let before = FileManager.default.contents(atPath: url.path)
        expectCode(.foreignDatabase)
        expectCode(.foreignDatabase, resetOnFailure: true)
        #expect(FileManager.default.contents(atPath: url.path) == before)

        try FileManager.default.removeItem(at: url)
        try writeGoodStore()
        try garble("Pet")
        expectCode(.corrupt)
        let stack = try open(resetOnFailure: true)
        #expect(try Context(stack: stack).beginUpdateAndWait { try $0.fetchCount(Person.self) } == 0)
    }

    /// Any schema object that ContextStack did not make — a view alone included — makes the
    /// file someone else's database.
    @Test(arguments: [
        "CREATE VIEW answer AS SELECT 42 AS value",
        "CREATE TABLE notes (body TEXT); CREATE INDEX notes_body ON notes (body)",
    ])
    func aDatabaseWithAnySchemaOfItsOwnIsSomeoneElses(schema: String) throws {
        defer { cleanUp() }
        do {
            let db = try Connection(path: url.path)
            try db.execute(schema)
        }
        let before = FileManager.default.contents(atPath: url.path)
        expectCode(.foreignDatabase)
        expectCode(.foreignDatabase, resetOnFailure: true)
        #expect(FileManager.default.contents(atPath: url.path) == before)
        let db = try Connection(path: url.path)
        #expect(try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'Z_METADATA'") == .integer(0))
    }

    /// A file of zero bytes is SQLite's empty database: it becomes a new store (as a file made
    /// by `mkstemp` or `touch` would be used).
    @Test func aZeroByteFileBecomesANewStore() throws {
        defer { cleanUp() }
        try Data().write(to: url)
        try writeStore([Person.self, Pet.self], at: url) { update in
            try update.create(Person.self).name = "Ada"
        }
        let context = try openStore([Person.self, Pet.self], at: url)
        #expect(try context.beginUpdateAndWait { try $0.fetchAll(Person.self).map(\.name) } == ["Ada"])
    }

    /// Docs/Stores.md, "Bad files": an SQLite database with no table, view, index or trigger
    /// (someone's `PRAGMA user_version = 7` made it) becomes a new store; one with a view and
    /// nothing else is someone else's, `.foreignDatabase`, and is left as it was.
    @Test func anSQLiteDatabaseWithNoObjectsBecomesANewStoreAndOneWithAViewDoesNot() throws {
        defer { cleanUp() }
        do {
            let db = try Connection(path: url.path)
            try db.execute("PRAGMA user_version = 7")
        }
        let context = try openStore([Person.self, Pet.self], at: url)
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Ada"
            try update.commit()
        }
        #expect(try context.beginUpdateAndWait { try $0.fetchAll(Person.self).map(\.name) } == ["Ada"])

        let viewOnly = directory.appendingPathComponent("view.sqlite")
        do {
            let db = try Connection(path: viewOnly.path)
            try db.execute("CREATE VIEW one AS SELECT 1 AS one")
        }
        let before = FileManager.default.contents(atPath: viewOnly.path)
        let stack = try Stack(model: Model(Person.self, Pet.self))
        let error = #expect(throws: StoreError.self) { try stack.addDatabaseStore(at: viewOnly, resetOnFailure: true) }
        #expect(error?.code == .foreignDatabase, "\(String(describing: error))")
        #expect(FileManager.default.contents(atPath: viewOnly.path) == before)
    }

    /// Another stack of this process holding the file sees the reset: an empty store, not a
    /// file deleted under it.
    @Test func aResetEmptiesTheFileThroughSQLite() throws {
        defer { cleanUp() }
        try writeGoodStore()
        let holder = try Connection(path: url.path)
        #expect(try holder.scalar("SELECT count(*) FROM Person") == .integer(300))
        // The same entity names with other attributes: a model mismatch that cannot be migrated
        // without autoMigrating, so resetOnFailure replaces the store.
        let stack = try Stack(model: Model(OtherPerson.self))
        try stack.addDatabaseStore(at: url, autoMigrating: false, resetOnFailure: true)
        let context = try Context(stack: stack, updateTarget: .persistentStore)
        #expect(try context.beginUpdateAndWait { try $0.fetchCount(OtherPerson.self) } == 0)
        // The connection opened before the reset reads the same, emptied file.
        #expect(try holder.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'Pet'") == .integer(0))
        #expect(try holder.scalar("SELECT count(*) FROM Person") == .integer(0))
    }

    @Test func aTruncatedStoreThrowsOrIsReset() throws {
        defer { cleanUp() }
        try writeGoodStore()
        let size = try #require(try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int)
        #expect(size > 4 * 4096)
        let handle = try FileHandle(forWritingTo: url)
        try handle.truncate(atOffset: UInt64(size / 2))
        try handle.close()
        expectCode(.corrupt)
        let stack = try open(resetOnFailure: true)
        let context = try Context(stack: stack, updateTarget: .persistentStore)
        #expect(try context.beginUpdateAndWait { try $0.fetchCount(Person.self) } == 0)
    }

    /// Docs/Stores.md, "Bad files": a file copied with its `-wal` after a write and before a
    /// checkpoint, whose main file holds fewer pages than the database (the rest are only in
    /// the log), opens with every row: ContextStack neither ignores the log nor takes the short
    /// file for `.corrupt`.
    @Test func aShortFileWhoseLogHoldsTheMissingPagesOpensWithEveryRow() throws {
        defer { cleanUp() }
        let stack = try open()
        let context = try Context(stack: stack, updateTarget: .persistentStore)
        try context.beginUpdateAndWait { update in
            for index in 0..<300 { try update.create(Person.self).name = String(repeating: "n", count: 100) + "\(index)" }
            try update.commit()
        }
        let copy = directory.appendingPathComponent("copy.sqlite")
        for suffix in ["", "-wal"] {
            try FileManager.default.copyItem(atPath: url.path + suffix, toPath: copy.path + suffix)
        }
        let pages = try #require(try Connection(path: url.path, readOnly: true).scalar("SELECT page_count * page_size FROM pragma_page_count, pragma_page_size").int64Value)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: copy.path)[.size] as? Int)
        try #require(Int64(size) < pages, "the copy's main file is short: \(size) bytes of \(pages)")
        let reopened = try Stack(model: Model(Person.self, Pet.self))
        try reopened.addDatabaseStore(at: copy)
        #expect(try Context(stack: reopened).beginUpdateAndWait { try $0.fetchCount(Person.self) } == 300)
        withExtendedLifetime(stack) {}
    }

    @Test func aStoreWithADamagedSchemaPageThrowsOrIsReset() throws {
        defer { cleanUp() }
        try writeGoodStore()
        // Overwrite the schema table on page 1, past the 100-byte file header.
        let handle = try FileHandle(forWritingTo: url)
        try handle.seek(toOffset: 100)
        try handle.write(contentsOf: Data(repeating: 0xFF, count: 3000))
        try handle.close()
        expectCode(.corrupt)
        let stack = try open(resetOnFailure: true)
        let context = try Context(stack: stack, updateTarget: .persistentStore)
        #expect(try context.beginUpdateAndWait { try $0.fetchCount(Person.self) } == 0)
    }

    @Test func damageInsideATableIsATypedErrorWhenRead() throws {
        defer { cleanUp() }
        try writeGoodStore()
        let db = try Connection(path: url.path)
        let page = try #require(try db.scalar("SELECT rootpage FROM sqlite_master WHERE name = 'Person'").int64Value)
        let pageSize = try #require(try db.scalar("PRAGMA page_size").int64Value)
        let handle = try FileHandle(forWritingTo: url)
        try handle.seek(toOffset: UInt64((page - 1) * pageSize))
        try handle.write(contentsOf: Data(repeating: 0xFF, count: Int(pageSize)))
        try handle.close()
        let stack = try open()
        let context = try Context(stack: stack, updateTarget: .persistentStore)
        #expect {
            try context.beginUpdateAndWait { try $0.fetchAll(Person.self) }
        } throws: { error in
            (error as? SQLiteError)?.code.primary == .corrupt
        }
    }

    @Test func aDirectoryIsNotAStore() throws {
        defer { cleanUp() }
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false)
        expectCode(.cannotOpen)
    }

    @Test func aMissingDirectoryCannotBeOpened() throws {
        defer { cleanUp() }
        let stack = try Stack(model: Model(Person.self, Pet.self))
        #expect {
            try stack.addDatabaseStore(at: directory.appendingPathComponent("missing/store.sqlite"))
        } throws: { ($0 as? StoreError)?.code == .cannotOpen }
    }

    /// What root cannot get from permissions, a read-only file system gives: `/proc` accepts no
    /// new files.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/proc/self")))
    func aDirectoryWhereNoFileCanBeCreatedThrows() throws {
        defer { cleanUp() }
        let stack = try Stack(model: Model(Person.self, Pet.self))
        #expect {
            try stack.addDatabaseStore(at: URL(fileURLWithPath: "/proc/self/contextstack.sqlite"))
        } throws: { error in
            guard let code = (error as? StoreError)?.code else { return false }
            return code == .cannotOpen || code == .permissionDenied
        }
    }
}
