@testable import ContextStack
import Foundation
import Testing

/// Files that are not good stores: each gives its documented `StoreError`, never a crash, and a
/// file ContextStack did not create is never changed.
@Suite struct BadFileTests {
    let directory: URL
    let url: URL

    init() throws {
        directory = try makeTemporaryDirectory()
        url = directory.appendingPathComponent("store.sqlite")
    }

    func cleanUp() {
        try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
        try? FileManager.default.removeItem(at: directory)
    }

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
    ])
    func aFileThatIsNotSQLiteIsLeftUntouched(contents: Data) throws {
        defer { cleanUp() }
        try contents.write(to: url)
        expectCode(.notADatabase)
        expectCode(.notADatabase, resetOnFailure: true)
        #expect(FileManager.default.contents(atPath: url.path) == contents)
        #expect(!FileManager.default.fileExists(atPath: url.path + "-wal"))
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

    // Root ignores file permissions, so these two run only for other users.

    @Test(.enabled(if: geteuid() != 0, "root ignores file permissions"))
    func aFileWithoutPermissionThrows() throws {
        defer { cleanUp() }
        try writeGoodStore()
        try FileManager.default.setAttributes([.posixPermissions: 0o000], ofItemAtPath: url.path)
        defer { try? FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: url.path) }
        expectCode(.permissionDenied)
        expectCode(.permissionDenied, resetOnFailure: true)
    }

    @Test(.enabled(if: geteuid() != 0, "root ignores file permissions"))
    func aReadOnlyDirectoryThrows() throws {
        defer { cleanUp() }
        try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: directory.path)
        expectCode(.permissionDenied)
        #expect(!FileManager.default.fileExists(atPath: url.path))
    }

    /// What root cannot get from permissions, a read-only file system gives: `/proc` accepts no
    /// new files.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/proc/self")))
    func aDirectoryWhereNoFileCanBeCreatedThrows() throws {
        let stack = try Stack(model: Model(Person.self, Pet.self))
        #expect {
            try stack.addDatabaseStore(at: URL(fileURLWithPath: "/proc/self/contextstack.sqlite"))
        } throws: { error in
            guard let code = (error as? StoreError)?.code else { return false }
            return code == .cannotOpen || code == .permissionDenied
        }
    }
}
