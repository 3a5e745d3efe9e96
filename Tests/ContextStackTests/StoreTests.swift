@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

@Suite struct StoreTests {
    @Test func theSchemaFollowsTheModel() throws {
        let store = try TestStore(.file)
        let db = try store.rawConnection()
        func columns(_ table: String) throws -> [String] {
            try db.rows("SELECT name FROM pragma_table_info(?)", [.text(table)]).compactMap { $0[0].stringValue }
        }
        #expect(try columns("Person") == ["Z_PK", "name", "age", "location", "email", "friend"])
        #expect(try columns("Pet") == ["Z_PK", "name", "age", "owner"])
        #expect(try columns("Z_Article_tags_Tag_articles") == ["source", "target"])
        let indexes = Set(try db.rows("SELECT name FROM sqlite_master WHERE type = 'index'").compactMap { $0[0].stringValue })
        #expect(indexes.isSuperset(of: ["Z_Person_unique_email", "Z_Person_friend", "Z_Pet_owner", "Z_Tag_name"]))
        let foreignKeys = try db.rows("SELECT \"from\", \"table\", \"to\" FROM pragma_foreign_key_list('Pet')")
        #expect(foreignKeys.map { $0.compactMap(\.stringValue) } == [["owner", "Person", "Z_PK"]])
        let unique = try db.scalar("SELECT sql FROM sqlite_master WHERE name = 'Z_Person_unique_email'").stringValue ?? ""
        #expect(unique.contains("UNIQUE"))
        let hash = try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'hash'")
        #expect(hash == .text(try Model(fullModelTypes).versionHash))
        #expect(try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'schema'").stringValue?.contains("table Person") == true)
    }

    /// A date is kept as seconds since 1970 in a double: for today's dates, to 2⁻²² s (a
    /// quarter of a microsecond). A `Date` holds seconds since 2001 with one bit more, so one
    /// read back can differ from the one set by that much (Docs/GettingStarted.md), while a
    /// query with the same `Date` finds it: both sides are converted alike.
    @Test(arguments: StoreKind.available) @MainActor
    func aDateIsKeptToAQuarterOfAMicrosecond(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        // The last bit of seconds since 2001 set: lost on the way to seconds since 1970.
        let when = Date(timeIntervalSinceReferenceDate: 817_000_000 + 0x1.0p-23)
        try world.beginUpdateAndWait { update in
            let sample = try update.create(Sample.self)
            sample.date = when
            #expect(sample.date != when && abs(sample.date.timeIntervalSince(when)) <= 0x1.0p-22, "\(sample.date.timeIntervalSince(when))")
            try update.commit()
        }
        let sample = try #require(try world.fetch(Sample.self, %"date" == when))
        #expect(abs(sample.date.timeIntervalSince(when)) <= 0x1.0p-22)
        #expect(try world.fetchCount(Sample.self, .where("date == %@", when)) == 1)
    }

    @Test @MainActor func everyAttributeTypeRoundTripsAcrossReopen() throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        let when = Date(timeIntervalSince1970: 1_700_000_000.25)
        let id = UUID()
        try world.beginUpdateAndWait { update in
            let sample = try update.create(Sample.self)
            sample.flag = true
            sample.int = -42
            sample.int16 = .max
            sample.int32 = .min
            sample.int64 = .max
            sample.double = 3.25
            sample.float = 1.5
            sample.string = "Ünïcödé ✓"
            sample.date = when
            sample.data = Data([0, 1, 2])
            sample.uuid = id
            sample.url = URL(string: "file:///tmp/a%20b")!
            sample.decimal = Decimal(string: "12345678901234567890.123")!
            sample.mood = .grumpy
            sample.level = .high
            sample.optionalString = "here"
            sample.optionalMood = .cheerful
            sample.optionalDecimal = 2.5
            _ = try update.create(Sample.self)  // all defaults
            try update.commit()
        }
        let reopened = try MainContext(stack: store.reopen())
        let samples = try reopened.fetchAll(Sample.self, orderBy: .descending("flag"))
        #expect(samples.count == 2)
        let sample = samples[0]
        #expect(sample.flag == true)
        #expect(sample.int == -42)
        #expect(sample.int16 == .max)
        #expect(sample.int32 == .min)
        #expect(sample.int64 == .max)
        #expect(sample.double == 3.25)
        #expect(sample.float == 1.5)
        #expect(sample.string == "Ünïcödé ✓")
        #expect(sample.date == when)
        #expect(sample.data == Data([0, 1, 2]))
        #expect(sample.uuid == id)
        #expect(sample.url == URL(string: "file:///tmp/a%20b")!)
        #expect(sample.decimal == Decimal(string: "12345678901234567890.123")!)
        #expect(sample.mood == .grumpy)
        #expect(sample.level == .high)
        #expect(sample.optionalString == "here")
        #expect(sample.optionalMood == .cheerful)
        #expect(sample.optionalDecimal == 2.5)
        #expect(sample.optionalInt == nil)
        #expect(sample.optionalDate == nil)
        #expect(sample.computed == -84)

        let defaults = samples[1]
        #expect(defaults.flag == false)
        #expect(defaults.string == "default")
        #expect(defaults.url == URL(string: "https://example.com")!)
        #expect(defaults.mood == .calm)
        #expect(defaults.level == .low)
        #expect(defaults.optionalFlag == nil)
        #expect(defaults.optionalUUID == nil)
        #expect(defaults.optionalMood == nil)
    }

    /// A stored raw value that matches no case (written by a later version of the app, say)
    /// reads as the property's default, or `nil` for an optional enum (Docs/GettingStarted.md,
    /// "Enums").
    @Test @MainActor func aStoredRawValueOfNoCaseReadsAsTheDefault() throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let sample = try update.create(Sample.self)
            (sample.mood, sample.optionalMood, sample.level) = (.grumpy, .cheerful, .high)
            try update.commit()
        }
        try store.stack.flushAndWait()
        try store.rawConnection().execute("UPDATE \"Sample\" SET \"mood\" = 'sleepy', \"optionalMood\" = 'sleepy', \"level\" = 7")
        let sample = try #require(try MainContext(stack: store.reopen()).fetch(Sample.self))
        #expect(sample.mood == .calm)
        #expect(sample.optionalMood == nil)
        #expect(sample.level == .low)
    }

    @Test @MainActor func transientPropertiesAreNotStored() throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let person = try update.create(Person.self)
            person.name = "Monk"
            person.scratch = 7
            #expect(person.scratch == 7)
            try update.commit()
        }
        let reopened = try MainContext(stack: store.reopen())
        #expect(try reopened.fetch(Person.self, %"name" == "Monk")?.scratch == 0)
    }

    @Test(arguments: StoreKind.available) @MainActor
    func objectIDsArePermanentFromCreate(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let (idAtCreate, idAfterCommit) = try world.beginUpdateAndWait { update in
            let person = try update.create(Person.self)
            person.name = "Farmer"
            let before = person.objectID
            try update.commit()
            return (before, person.objectID)
        }
        #expect(idAtCreate == idAfterCommit)
        let seen = try #require(try world.fetch(Person.self, %"name" == "Farmer"))
        #expect(seen.objectID == idAtCreate)
        let inAnotherUpdate = try world.beginUpdateAndWait { update in try update.fetch(Person.self, id: idAtCreate)?.name }
        #expect(inAnotherUpdate == "Farmer")
        try await store.stack.flush()
        if kind == .file {
            let reopened = try MainContext(stack: store.reopen())
            #expect(try reopened.fetch(Person.self, id: idAtCreate)?.name == "Farmer")
            #expect(try reopened.fetchIDs(Person.self) == [idAtCreate])
        }
    }

    @Test @MainActor func keysAreNeverReusedAcrossReopen() throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        let first = try world.beginUpdateAndWait { update in
            let ids = try (0..<3).map { _ in try update.create(Pet.self).objectID }
            try update.commit()
            return ids
        }
        let reopened = try MainContext(stack: store.reopen())
        let second = try reopened.beginUpdateAndWait { update in
            let id = try update.create(Pet.self).objectID
            try update.commit()
            return id
        }
        #expect(!first.contains(second))
        #expect(second.primaryKey > first.map(\.primaryKey).max()!)
    }

    @Test @MainActor func reopeningFindsObjectsAndRelationships() throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let farmer = try update.create(Person.self)
            farmer.name = "Farmer"
            let knight = try update.create(Person.self)
            knight.name = "Knight"
            knight.friend = farmer
            let rex = try update.create(Pet.self)
            rex.name = "Rex"
            rex.owner = farmer
            let article = try update.create(Article.self)
            article.title = "News"
            let tag = try update.create(Tag.self)
            tag.name = "swift"
            article.tags = [tag]
            try update.commit()
        }
        let reopened = try MainContext(stack: store.reopen())
        let farmer = try #require(try reopened.fetch(Person.self, %"name" == "Farmer"))
        #expect(farmer.friendOf.map(\.name) == ["Knight"])
        #expect(farmer.pets.map(\.name) == ["Rex"])
        let tag = try #require(try reopened.fetch(Tag.self))
        #expect(tag.articles.map(\.title) == ["News"])
        #expect(try reopened.fetch(Person.self, %"name" == "Knight")?.friend === farmer)
    }

    @Test func aStoreWrittenByAnotherModelThrowsOrResets() throws {
        let store = try TestStore(.file, types: [Loner.self, Stranger.self])
        try store.stack.flushAndWait()
        let url = try #require(store.url)
        let other = try Stack(model: Model(Person.self, Pet.self))
        #expect {
            try other.addDatabaseStore(at: url, autoMigrating: false)
        } throws: { error in
            (error as? StoreError)?.code == .modelMismatch
        }
        let resetting = try Stack(model: Model(Person.self, Pet.self))
        try resetting.addDatabaseStore(at: url, autoMigrating: false, resetOnFailure: true)
        let db = try store.rawConnection()
        #expect(try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'Stranger'") == .integer(0))
        #expect(try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'Person'") == .integer(1))
    }

    @Test func aFileThatIsNotADatabaseThrows() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("text.sqlite")
        let text = Data(String(repeating: "not a database ", count: 100).utf8)
        try text.write(to: url)
        let stack = try Stack(model: Model(Person.self, Pet.self))
        #expect {
            try stack.addDatabaseStore(at: url)
        } throws: { error in
            (error as? StoreError)?.code == .notADatabase
        }
        #expect(try Data(contentsOf: url) == text)
    }

    @Test func addingTheSameFileTwiceIsANoOpAndASecondStoreThrows() throws {
        let store = try TestStore(.file)
        try store.stack.addDatabaseStore(at: #require(store.url))
        #expect(throws: StoreError.self) { try store.stack.addInMemoryStore() }
    }
}

@Suite struct ForeignFileTests {
    @Test func aDatabaseContextStackDidNotCreateIsLeftAlone() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("theirs.sqlite")
        do {
            let db = try Connection(path: url.path)
            try db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER); INSERT INTO accounts VALUES (1, 100)")
        }
        for reset in [false, true] {
            let stack = try Stack(model: Model(Person.self, Pet.self))
            #expect {
                try stack.addDatabaseStore(at: url, resetOnFailure: reset)
            } throws: { error in
                (error as? StoreError)?.code == .foreignDatabase
            }
        }
        let db = try Connection(path: url.path)
        #expect(try db.scalar("SELECT balance FROM accounts") == .integer(100))
        #expect(try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'Person'") == .integer(0))
    }
}
