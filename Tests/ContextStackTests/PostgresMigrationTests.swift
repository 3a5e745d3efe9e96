@testable import ContextStack
import ContextStackPostgres
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
@testable import _ContextStackPostgresStore
import Foundation
import Testing

/// Lightweight migration of a PostgreSQL store: the model versions of `MigrationTests`, opened
/// on a PostgreSQL schema instead of a file. What Docs/Postgres.md ("Migration") promises:
/// everything SQLite's migration infers, in one transaction, once however many servers open
/// the store, and a database left exactly as it was when the change cannot be inferred.
@Suite(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server: see PostgresServer"))
struct PostgresMigrationTests {
    let schema: TestSchema

    init() throws {
        schema = try TestSchema()
    }

    /// A context on the store opened with `types`, writing as it commits.
    func open(_ types: [ManagedObject.Type], autoMigrating: Bool = true) throws -> Context {
        let stack = try Stack(model: Model(types), rootContext: .none)
        try stack.addPostgresStore(url: schema.url, autoMigrating: autoMigrating)
        return try Context(stack: stack, updateTarget: .persistentStore)
    }

    func write(_ types: [ManagedObject.Type], _ body: (Update) throws -> Void) throws {
        try open(types).beginUpdateAndWait { update in
            try body(update)
            try update.commit()
        }
    }

    func connection() throws -> PostgresConnection { try PostgresConnection(PostgresSettings(url: schema.url)) }

    /// What the database holds, to show that a refused migration left it as it was.
    func contents() throws -> [[Value]] {
        let db = try connection()
        var result = try db.allRows("SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY 1, 2")
        result += try db.allRows("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() ORDER BY 1")
        result += try db.allRows("SELECT key, value FROM \"Z_METADATA\" ORDER BY key")
        return result
    }

    @Test func everyInferableChangeKeepsTheData() throws {
        defer { schema.drop() }
        try write([ItemV1.self, OwnerV1.self, GoneV1.self], fillVersion1)
        let context = try open([ProductV2.self, OwnerV2.self, LabelV2.self])
        try context.beginUpdateAndWait { update in
            let products = try expectVersion1Migrated(update)
            #expect(try update.fetchCount(ProductV2.self, %"added" == 7 && %"note" == "none") == 3)
            let owner = try #require(try update.fetch(OwnerV2.self))
            #expect(owner.label == "Ann")
            let label = try update.create(LabelV2.self)
            label.name = "sale"
            for product in products.prefix(2) {
                product.owner = owner
                product.labels.insert(label)
            }
            // Keys continue after the old rows: the sequence followed its table's rename.
            let fresh = try update.create(ProductV2.self)
            #expect(fresh.objectID.primaryKey > products.map(\.objectID.primaryKey).max()!)
            fresh.code = "code 0-new"
            try update.commit()
        }
        try open([ProductV2.self, OwnerV2.self, LabelV2.self]).beginUpdateAndWait { (update: Update) throws in
            #expect(try update.fetch(OwnerV2.self)?.products.count == 2)
            #expect(try update.fetch(LabelV2.self)?.products.map(\.heading).sorted() == ["item 0", "item 1"])
            // The unique constraint is an index now.
            try update.create(ProductV2.self).code = "code 1"
            #expect(throws: SaveError.self) { try update.commit() }
        }
        let db = try connection()
        let tables = Set(try db.allRows("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").compactMap { $0[0].stringValue })
        // With the history tables, which a PostgreSQL store has by default (Docs/History.md).
        #expect(tables == ["Z_METADATA", "Product", "Owner", "Label", "Z_Label_products_Product_labels", "Z_HISTORY"])
        let sequences = Set(try db.allRows("SELECT sequencename FROM pg_sequences WHERE schemaname = current_schema()").compactMap { $0[0].stringValue })
        #expect(sequences == ["Z_KEYS_Product", "Z_KEYS_Owner", "Z_KEYS_Label"])
        let columns = Set(try db.allRows("SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'Product'").compactMap { $0[0].stringValue })
        #expect(columns == ["Z_PK", "Z_VERSION", "heading", "count", "note", "code", "added", "optionalAdded", "owner"])
        #expect(try db.scalar("SELECT value FROM \"Z_METADATA\" WHERE key = 'hash'") == .text(try Model(ProductV2.self, OwnerV2.self, LabelV2.self).versionHash))
    }

    /// An older version of the app opening a database a newer version migrated: migrating
    /// back would drop the newer model's tables and columns with their data, so it is refused
    /// (`.newerModel`, naming them) and the database is left as it was
    /// (`MigrationTests.anOlderModelDoesNotMigrateBackOverWhatANewerOneWrote`, on SQLite).
    @Test func anOlderModelDoesNotMigrateBackOverWhatANewerOneWrote() throws {
        defer { schema.drop() }
        try write([ItemV1.self, OwnerV1.self, GoneV1.self], fillVersion1)
        let newer = [ProductV2.self, OwnerV2.self, LabelV2.self] as [ManagedObject.Type]
        try write(newer) { update in
            let label = try update.create(LabelV2.self)
            label.name = "sale"
            try #require(try update.fetch(ProductV2.self)).labels.insert(label)
        }
        let before = try contents()
        // Refused before any table is locked: a reader holding the newer tables does not make
        // it wait (a lock wait of the 5 s timeout would fail it with 55P03 otherwise). (Not less:
        // the timeout bounds the wait for the advisory lock too, which the installs of the tests
        // running at once take.)
        let reader = try connection()
        try reader.execute("BEGIN; LOCK TABLE \"Product\", \"Label\" IN ACCESS SHARE MODE")
        let hurried = try #require(throws: StoreError.self) {
            let stack = try Stack(model: Model(ItemV1.self, OwnerV1.self, GoneV1.self), rootContext: .none)
            try stack.addPostgresStore(url: schema.url.addingServerOption("-cstatement_timeout=5000"))
        }
        #expect(hurried.code == .newerModel, "\(hurried)")
        try reader.execute("COMMIT")
        let refused = try #require(throws: StoreError.self) { try open([ItemV1.self, OwnerV1.self, GoneV1.self]) }
        #expect(refused.code == .newerModel)
        #expect(refused.message.contains("the table Label") && refused.message.contains("the table Product,")
                && refused.message.contains("Nothing was changed"), "\(refused.message)")
        #expect(try contents() == before)
        try open(newer).beginUpdateAndWait { (update: Update) throws in
            #expect(try update.fetch(LabelV2.self)?.products.count == 1)
        }

        // A column and the rows of a sub-entity the older model does not have.
        try write([WorkerV1.self]) { try $0.create(WorkerV1.self).name = "Ada" }
        try open([WorkerV2.self, WelderV2.self]).beginUpdateAndWait { update in
            try update.create(WelderV2.self).name = "Wes"
            try update.commit()
        }
        let welded = try #require(throws: StoreError.self) { try open([WorkerV1.self]) }
        #expect(welded.message.contains("the column Worker.torch"), "\(welded.message)")
        #expect(welded.message.contains("the rows of Worker whose entities the model no longer has"), "\(welded.message)")
        // A return that drops nothing migrates, and the history records it.
        try write([GadgetV1.self]) { try $0.create(GadgetV1.self).serial = "S1" }
        _ = try open([GadgetV2.self])
        #expect(try open([GadgetV1.self]).beginUpdateAndWait { try $0.fetch(GadgetV1.self)?.serial } == "S1")
    }

    /// A migration drops and creates again ContextStack's own indexes only: one a DBA added,
    /// and the index behind a constraint someone added, are still there after it.
    @Test func indexesSomeoneElseAddedSurviveAMigration() throws {
        defer { schema.drop() }
        try write([GadgetV1.self]) { update in
            for index in 0..<3 { try update.create(GadgetV1.self).serial = "S\(index)" }
        }
        try connection().execute("CREATE INDEX dba_label ON \"Gadget\" (lower(label)); ALTER TABLE \"Gadget\" ADD CONSTRAINT dba_size_serial UNIQUE (size, serial)")
        _ = try open([GadgetV2.self])
        let indexes = Set(try connection().allRows("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'Gadget'").compactMap { $0[0].stringValue })
        #expect(indexes == ["Gadget_pkey", "dba_label", "dba_size_serial"], "\(indexes)")
        _ = try open([GadgetV1.self])
        let again = Set(try connection().allRows("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'Gadget'").compactMap { $0[0].stringValue })
        #expect(again == ["Gadget_pkey", "dba_label", "dba_size_serial", "Z_Gadget_size", "Z_Gadget_unique_serial"], "\(again)")
    }

    /// Views and triggers someone else added outlive a migration that keeps what they name,
    /// as on SQLite (Docs/Postgres.md, "Migration"); a view of a column the migration removes
    /// stops it with `.cannotOpen`, naming the view, and so does a trigger `UPDATE OF` it; the
    /// database, the view or trigger with it, is left as it was.
    @Test func viewsAndTriggersSomeoneAddedOutliveAMigrationThatKeepsWhatTheyName() throws {
        defer { schema.drop() }
        try write([GadgetV1.self]) { update in try update.create(GadgetV1.self).serial = "S1" }
        try connection().execute("""
            CREATE TABLE notes (text text); INSERT INTO notes VALUES ('theirs');
            CREATE VIEW serials AS SELECT serial FROM "Gadget";
            CREATE FUNCTION note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO notes VALUES (NEW.serial); RETURN NEW; END $$;
            CREATE TRIGGER noted AFTER UPDATE OF serial ON "Gadget" FOR EACH ROW EXECUTE FUNCTION note();
            CREATE VIEW labels AS SELECT label FROM "Gadget"
            """)
        let before = try contents()
        let error = #expect(throws: StoreError.self) { _ = try open([GadgetUnlabelled.self]) }
        #expect(error?.code == .cannotOpen && error?.message.contains("view labels depends on column label") == true, "\(String(describing: error))")
        #expect(try contents() == before)
        try connection().execute("DROP VIEW labels; CREATE TRIGGER labelled AFTER UPDATE OF label ON \"Gadget\" FOR EACH ROW EXECUTE FUNCTION note()")
        let triggered = #expect(throws: StoreError.self) { _ = try open([GadgetUnlabelled.self]) }
        #expect(triggered?.code == .cannotOpen && triggered?.message.contains("trigger labelled on table \"Gadget\" depends on column label") == true, "\(String(describing: triggered))")
        try connection().execute("DROP TRIGGER labelled ON \"Gadget\"")
        let context = try open([GadgetUnlabelled.self])
        try context.beginUpdateAndWait { update in
            let gadget = try #require(try update.fetch(GadgetUnlabelled.self))
            gadget.serial = "S2"
            try update.commit()
        }
        #expect(try connection().scalar("SELECT serial FROM serials") == .text("S2"))
        #expect(try connection().allRows("SELECT text FROM notes ORDER BY text") == [[.text("S2")], [.text("theirs")]])
    }

    /// A migration keeps the indexes the new model still wants as they are: adding an
    /// attribute does not rebuild them (each `DROP INDEX` would hold its table's exclusive lock
    /// until the migration commits). Indexes it no longer wants go, and come back when wanted.
    @Test func aMigrationKeepsTheIndexesThatDidNotChange() throws {
        defer { schema.drop() }
        try write([GadgetV1.self]) { update in
            for index in 0..<3 { try update.create(GadgetV1.self).serial = "S\(index)" }
        }
        func indexes() throws -> [String: Int64] {
            var found: [String: Int64] = [:]
            for row in try connection().allRows("SELECT indexname, (quote_ident(indexname)::regclass)::oid::bigint FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'Gadget'") {
                if let name = row[0].stringValue, case .integer(let oid) = row[1] { found[name] = oid }
            }
            return found
        }
        let before = try indexes()
        #expect(Set(before.keys) == ["Gadget_pkey", "Z_Gadget_size", "Z_Gadget_unique_serial"])
        _ = try open([GadgetNoted.self])
        #expect(try indexes() == before, "the same indexes, not made again")
        _ = try open([GadgetV2.self])
        #expect(Set(try indexes().keys) == ["Gadget_pkey"])
        let count = try open([GadgetV1.self]).beginUpdateAndWait { update in try update.fetchCount(GadgetV1.self, %"size" == 0) }
        #expect(count == 3)
        let again = try indexes()
        #expect(Set(again.keys) == Set(before.keys))
        _ = try open([GadgetNoted.self])
        #expect(try indexes() == again)
    }

    /// Docs/Postgres.md, "Migration": an index of ContextStack's without its comment (made by a
    /// version before 2026-11-28) is made again once, at the next migration, with its comment;
    /// the migration after keeps it.
    @Test func anIndexWithoutItsCommentIsMadeAgainOnce() throws {
        defer { schema.drop() }
        try write([GadgetV1.self]) { update in try update.create(GadgetV1.self).serial = "S1" }
        let oid = "SELECT ('\"Z_Gadget_size\"'::regclass)::oid::bigint"
        let comment = "SELECT obj_description('\"Z_Gadget_size\"'::regclass, 'pg_class')"
        try connection().execute("COMMENT ON INDEX \"Z_Gadget_size\" IS NULL")
        let before = try connection().scalar(oid)
        _ = try open([GadgetNoted.self])
        let remade = try connection().scalar(oid)
        #expect(remade != before, "made again")
        #expect(try connection().scalar(comment) != .null)
        _ = try open([GadgetNotedTwice.self])
        #expect(try connection().scalar(oid) == remade, "kept once it has its comment")
    }

    /// An index follows its column when the column is renamed. Renaming the indexed `size` to
    /// `dimension` and adding a new indexed `size` leaves each index on its own column: the
    /// index named for `size`, whose SQL is unchanged, was kept before, on the renamed column,
    /// and the new `size` had none. The values go to `dimension` whichever of the two is
    /// declared first (`backwards`: the new `size` first, which took the old column before).
    @Test(arguments: [false, true])
    func aKeptIndexIsOnTheColumnItsModelNamesAfterARename(backwards: Bool) throws {
        defer { schema.drop() }
        try write([GadgetV1.self]) { update in
            for index in 0..<3 { try update.create(GadgetV1.self).serial = "S\(index)" }
        }
        try write([GadgetV1.self]) { update in
            for gadget in try update.fetchAll(GadgetV1.self) { gadget.size = 7 }
        }
        func moved<T: ManagedObject>(_ type: T.Type) throws -> Int {
            try open([type]).beginUpdateAndWait { update in try update.fetchCount(type, %"dimension" == 7 && %"size" == 0) }
        }
        #expect(try (backwards ? moved(GadgetResizedBackwards.self) : moved(GadgetResized.self)) == 3, "the sizes moved to dimension")
        var definitions: [String: String] = [:]
        for row in try connection().allRows("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'Gadget'") {
            if let name = row[0].stringValue, let definition = row[1].stringValue { definitions[name] = definition }
        }
        #expect(definitions["Z_Gadget_size"]?.hasSuffix("(size)") == true, "\(definitions)")
        #expect(definitions["Z_Gadget_dimension"]?.hasSuffix("(dimension)") == true, "\(definitions)")
    }

    /// Entities renamed in one version, beside a new entity given the old name (`Crate` to
    /// `Parcel`, a new `Crate`), then in a chain (that `Crate` to `Box`, `Box` to `Carton`,
    /// `Parcel` keeping its table though its `originalName` still says `Crate`): the tables
    /// are renamed in place in an order that frees each name first, and the new one is made.
    @Test func entitiesRenamedInOneVersionEachTakeTheRowsTheirOriginalNameNames() throws {
        defer { schema.drop() }
        func labels(_ table: String) throws -> [[Value]] {
            try connection().allRows("SELECT label FROM \"\(table)\" ORDER BY label")
        }
        try write([CrateV1.self, BoxV1.self, Bin.self]) { update in
            try update.create(CrateV1.self).label = "crate"
            try update.create(BoxV1.self).label = "box"
            let bin = try update.create(Bin.self)
            bin.label = "box's"
            try #require(try update.fetch(BoxV1.self)).bins = [bin]
        }
        try write([ParcelFromCrate.self, CrateV2.self, BoxV1.self, Bin.self]) { update in
            #expect(try update.fetchCount(CrateV2.self) == 0)
            try update.create(CrateV2.self).weight = 3
        }
        #expect(try labels("Parcel") == [[.text("crate")]])
        #expect(try connection().allRows("SELECT weight FROM \"Crate\"") == [[.integer(3)]])
        _ = try open([ParcelFromCrate.self, BoxFromCrate.self, CartonFromBox.self, Bin.self])
        #expect(try labels("Parcel") == [[.text("crate")]])
        #expect(try labels("Box") == [[.text("")]], "the new Crate's row, which had no label")
        #expect(try labels("Carton") == [[.text("box")]])
        #expect(try connection().allRows("""
            SELECT t.label, b.label FROM "Carton" t JOIN "Z_Carton_bins" j ON j.source = t."Z_PK" JOIN "Bin" b ON b."Z_PK" = j.target
            """) == [[.text("box"), .text("box's")]], "the boxes' pairs went with them")
        #expect(try connection().scalar("SELECT count(*) FROM \"Z_Box_bins\"") == .integer(0))
        let indexes = try connection().allRows("""
            SELECT tablename, indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename IN ('Box', 'Carton') AND indexname LIKE '%label' ORDER BY 1, 2
            """)
        #expect(indexes == [[.text("Box"), .text("Z_Box_label")], [.text("Carton"), .text("Z_Carton_label")]], "each table has the index on its own label")
    }

    /// Renames chained in one version (`label` to `caption`, `serial` to `label`) are made in
    /// place in an order that frees each name before a column takes it, and the index the model
    /// names for `label` ends up on the column now called `label`.
    @Test func renamesChainedInOneVersionEachTakeTheValuesTheirPropertyNames() throws {
        defer { schema.drop() }
        try write([GadgetV1.self]) { update in
            for index in 0..<3 {
                let gadget = try update.create(GadgetV1.self)
                (gadget.serial, gadget.label) = ("S\(index)", "L\(index)")
            }
        }
        _ = try open([GadgetRelabelled.self])
        #expect(try connection().allRows("SELECT label, caption FROM \"Gadget\" ORDER BY \"Z_PK\"")
                == (0..<3).map { [.text("S\($0)"), .text("L\($0)")] })
        let definition = try connection().allRows("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'Z_Gadget_label'")
        #expect(definition.first?.first?.stringValue?.hasSuffix("(label)") == true, "\(definition)")
        _ = try open([GadgetRelabelledWithSerial.self])
        _ = try open([GadgetRelabelledAndNoted.self])
        #expect(try connection().allRows("SELECT label, caption, serial FROM \"Gadget\" ORDER BY \"Z_PK\"")
                == (0..<3).map { [.text("S\($0)"), .text("L\($0)"), .text("none")] })
    }

    /// A migration's statements are not cancelled by the statement timeout, however long they
    /// take (here an `UPDATE` filling defaults, slowed by a trigger); its waits for locks are
    /// bounded by it instead: behind another transaction's lock on the table it fails with
    /// `lockNotAvailable`, leaving the database as it was, and succeeds once the lock is gone.
    @Test func aMigrationTakesAsLongAsItNeedsButWaitsForLocksNoLongerThanTheTimeout() throws {
        defer { schema.drop() }
        // Not shorter: the timeout bounds the wait for the advisory lock too, which the installs
        // of the tests running at once take.
        let url = schema.url.addingServerOption("-cstatement_timeout=2000")
        func openV1() throws {
            let stack = try Stack(model: Model(GadgetV1.self), rootContext: .none)
            try stack.addPostgresStore(url: url)
        }
        try write([GadgetV2.self]) { update in
            for index in 0..<3 { try update.create(GadgetV2.self).serial = "S\(index)" }
        }
        let db = try connection()
        try db.execute("""
            CREATE FUNCTION slowly() RETURNS trigger AS $$ BEGIN PERFORM pg_sleep(1); RETURN NEW; END $$ LANGUAGE plpgsql;
            CREATE TRIGGER slowly BEFORE UPDATE ON "Gadget" FOR EACH ROW EXECUTE FUNCTION slowly()
            """)
        let holder = try connection()
        try holder.execute("BEGIN; LOCK TABLE \"Gadget\" IN ROW EXCLUSIVE MODE")    // as a writer holds it
        let before = try contents()
        let waited = try #require(throws: PostgresError.self) { try openV1() }
        #expect(waited.code == .lockNotAvailable, "\(waited)")
        #expect(try contents() == before)
        try holder.execute("COMMIT")
        // Three rows of 1 s in one UPDATE: past the 2 s timeout, and past the client's wait for
        // an answer when its margin is half a second (the store's is 30 s).
        var patient = PostgresSettings(url: url)
        patient.hungServerMargin = 500
        let part = StoreSchema(graph: try Model(GadgetV1.self).graph, configuration: nil)
        #expect(try PostgresSchemaInstaller.install(part, on: PostgresConnection(patient), autoMigrating: true) == .migrated)
        #expect(try db.allRows("SELECT label FROM \"Gadget\"") == Array(repeating: [.text("plain")], count: 3))

        // A server starting while another migrates waits under its statement timeout, and one
        // that gives up can start again later.
        try holder.execute("BEGIN")
        try holder.execute(PostgresSchemaInstaller.lockStatement)
        let gaveUp = try #require(throws: PostgresError.self) { try openV1() }
        #expect(gaveUp.code == .queryCanceled, "\(gaveUp)")
        try holder.execute("COMMIT")
        try openV1()

        // A migration in another schema of the same database does not hold this one up.
        let elsewhere = try TestSchema()
        defer { elsewhere.drop() }
        let other = try PostgresConnection(PostgresSettings(url: elsewhere.url))
        try other.execute("BEGIN")
        try other.execute(PostgresSchemaInstaller.lockStatement)
        try openV1()
        try other.execute("COMMIT")
    }

    @Test func constraintsRemovedAndNonOptionalMadeOptionalKeepTheData() throws {
        defer { schema.drop() }
        try write([GadgetV1.self]) { update in
            for index in 0..<3 {
                let gadget = try update.create(GadgetV1.self)
                gadget.serial = "S\(index)"
                gadget.size = index
            }
        }
        try open([GadgetV2.self]).beginUpdateAndWait { update in
            let gadgets = try update.fetchAll(GadgetV2.self, orderBy: .ascending("size"))
            #expect(gadgets.map(\.serial) == ["S0", "S1", "S2"])
            #expect(gadgets.map(\.label) == ["plain", "plain", "plain"])
            try update.create(GadgetV2.self).serial = "S0"
            try update.commit()
        }
        #expect(try connection().scalar("SELECT count(*) FROM \"Gadget\" WHERE serial = 'S0'") == .integer(2))
    }

    /// A changed type, and a unique constraint the stored rows break, are refused; the database
    /// keeps every table, column, index, row and its description.
    @Test func whatCannotBeInferredLeavesTheDatabaseAsItWas() throws {
        defer { schema.drop() }
        try write([GadgetV2.self]) { update in
            for serial in ["S0", "S0"] { try update.create(GadgetV2.self).serial = serial }
        }
        let before = try contents()
        let retyped = try #require(throws: StoreError.self) { try open([GadgetRetyped.self]) }
        #expect(retyped.code == .cannotMigrate)
        #expect(retyped.message.contains("Gadget.serial changed type"))
        let duplicated = try #require(throws: StoreError.self) { try open([GadgetV1.self]) }
        #expect(duplicated.code == .cannotMigrate)
        #expect(duplicated.message.contains("Gadget.serial"))
        let strict = try #require(throws: StoreError.self) { try open([GadgetV1.self], autoMigrating: false) }
        #expect(strict.code == .modelMismatch)
        #expect(try contents() == before)
        #expect(try connection().scalar("SELECT count(*) FROM \"Gadget\"") == .integer(2))
    }

    @Test func subEntitiesAddedAndCodesMovedKeepEveryRowItsEntity() throws {
        defer { schema.drop() }
        try write([WorkerV1.self, CrewV1.self, PilotV1.self, StewardV1.self]) { update in
            try update.create(WorkerV1.self).name = "Ada"
            try update.create(PilotV1.self).name = "Amelia"
            try update.create(StewardV1.self).name = "Sam"
        }
        try open([WorkerV2.self, WelderV2.self, CrewV2.self, MedicV2.self, PilotV2.self, StewardV2.self]).beginUpdateAndWait { update in
            #expect(try update.fetchAll(WorkerV2.self).map(\.name) == ["Ada"])
            #expect(try update.fetchCount(WelderV2.self) == 0)
            #expect(try update.fetchAll(PilotV2.self).map(\.name) == ["Amelia"])
            #expect(try update.fetchAll(StewardV2.self).map(\.name) == ["Sam"])
            #expect(try update.fetchCount(MedicV2.self) == 0)
            try update.create(WelderV2.self).name = "Wes"
            try update.commit()
        }
    }

    @Test func toManysGainingAndLosingAnInverseKeepTheirPairs() throws {
        defer { schema.drop() }
        try migrateToManysGainingAndLosingInverses { try open($0) }
        #expect(try connection().allRows("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'Z\\_%\\_%' ORDER BY 1")
                == [[.text("Z_Genre_songs")], [.text("Z_Song_genres")]])
        // Turned around, each table's primary key leads with `source`, which faults look up by.
        for table in ["Z_Genre_songs", "Z_Song_genres"] {
            #expect(try connection().scalar("""
                SELECT a.attname::text FROM pg_index x JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0]
                WHERE x.indrelid = ?::regclass AND x.indisprimary
                """, [.text("\"\(table)\"")]) == .text("source"), "\(table)")
        }
    }

    @Test func anAttributeRenamedInSomeSubEntitiesKeepsEveryEntitysValues() throws {
        defer { schema.drop() }
        try migrateAnAttributeRenamedInSomeSubEntities({ try open($0) }) { sql in try connection().allRows(sql) }
    }

    @Test func aParentEntityAddedOverAnotherKeepsItsRows() throws {
        defer { schema.drop() }
        try migrateAParentEntityAddedOverAnother { try open($0) }
    }

    @Test func twoEntitiesPutUnderOneParentAreRefused() throws {
        defer { schema.drop() }
        try migrateTwoEntitiesPutUnderOneParent { try open($0) }
    }

    @Test func anOlderModelDoesNotEmptyOneSubEntitysValuesInASharedColumn() throws {
        defer { schema.drop() }
        try migrateBackOverASubEntitysValuesInASharedColumn { try open($0) }
    }

    @Test func relationshipsRenamedKeepTheirReferences() throws {
        defer { schema.drop() }
        try migrateRenamedRelationships { try open($0) }
    }

    @Test func aChainOfRelationshipRenamesKeepsEachRelationshipsPairs() throws {
        defer { schema.drop() }
        try migrateAChainOfRelationshipRenames { try open($0) }
    }

    @Test func aRenamedEntityKeepsItsTableBesideANewSubEntityOfItsOldName() throws {
        defer { schema.drop() }
        try migrateARenameBesideANewSubEntityOfTheOldName { try open($0) }
    }

    @Test func aToManyWhoseInverseSharedItsColumnTakesItsOwnPairsAlone() throws {
        defer { schema.drop() }
        try migrateAToManyWhoseInverseSharedItsColumn({ try open($0) }) { sql in try connection().allRows(sql) }
    }

    @Test func aToManyToANewEntityStartsEmpty() throws {
        defer { schema.drop() }
        try migrateAToManyToANewEntity { try open($0) }
    }

    @Test func aToManyWhoseToOneInverseGoesAndComesBackKeepsItsPairs() throws {
        defer { schema.drop() }
        try migrateAToManyWhoseToOneInverseGoesAndComesBack { try open($0) }
        #expect(try connection().scalar("SELECT count(*) FROM \"Z_Topic_replies\"") == .integer(4))
    }

    @Test func aToOneWhoseDestinationChangedStartsEmpty() throws {
        defer { schema.drop() }
        try migrateToOnesWhoseDestinationChanged { try open($0) }
    }

    /// "Volume" (once "Book") sorts after "Shelf": the join table's columns change places.
    @Test func aRenamedManyToManyKeepsItsPairs() throws {
        defer { schema.drop() }
        try write([BookV1.self, ShelfV1.self]) { update in
            let book = try update.create(BookV1.self)
            book.title = "Dune"
            let shelf = try update.create(ShelfV1.self)
            shelf.name = "SF"
            book.shelves.insert(shelf)
        }
        try open([VolumeV2.self, ShelfV2.self]).beginUpdateAndWait { update in
            let volume = try #require(try update.fetch(VolumeV2.self))
            #expect(volume.title == "Dune")
            #expect(volume.shelves.map(\.name) == ["SF"])
            #expect(try update.fetch(ShelfV2.self)?.books.map(\.title) == ["Dune"])
        }
    }

    /// Six app servers starting with the new model at once: one migrates, the others find it
    /// done.
    @Test func serversStartingTogetherMigrateOnce() throws {
        defer { schema.drop() }
        try write([GadgetV1.self]) { update in try update.create(GadgetV1.self).serial = "S0" }
        let graph = try Model(GadgetV2.self).graph
        let part = StoreSchema(graph: graph, configuration: nil)
        let outcomes = Locked<[PostgresSchemaInstaller.Outcome]>([])
        let errors = Locked<[String]>([])
        let url = schema.url
        DispatchQueue.concurrentPerform(iterations: 6) { _ in
            do {
                let outcome = try PostgresSchemaInstaller.install(part, on: PostgresConnection(PostgresSettings(url: url)), autoMigrating: true)
                outcomes.withLock { $0.append(outcome) }
            } catch {
                errors.withLock { $0.append("\(error)") }
            }
        }
        #expect(errors.withLock { $0 }.isEmpty, "\(errors.withLock { $0 })")
        #expect(outcomes.withLock { $0.filter { $0 == .migrated }.count } == 1)
        #expect(outcomes.withLock { $0.filter { $0 == .unchanged }.count } == 5)
    }
}

/// `GadgetV1` with one more attribute: the same indexes.
@Entity(name: "Gadget") final class GadgetNoted: ManagedObject {
    @Attribute(.unique) var serial: String = ""
    @Attribute(.indexed) var size: Int = 0
    var label: String = "plain"
    var note: String?
}

/// `GadgetNoted` with one more attribute still: the same indexes.
@Entity(name: "Gadget") final class GadgetNotedTwice: ManagedObject {
    @Attribute(.unique) var serial: String = ""
    @Attribute(.indexed) var size: Int = 0
    var label: String = "plain"
    var note: String?
    var remark: String?
}

/// `GadgetV1` whose indexed `size` is renamed `dimension`, with a new indexed `size`.
@Entity(name: "Gadget") final class GadgetResized: ManagedObject {
    @Attribute(.unique) var serial: String = ""
    @Attribute(.indexed, originalName: "size") var dimension: Int = 0
    @Attribute(.indexed) var size: Int = 0
    var label: String = "plain"
}

/// `GadgetResized` with the new `size` declared before the renamed one.
@Entity(name: "Gadget") final class GadgetResizedBackwards: ManagedObject {
    @Attribute(.unique) var serial: String = ""
    @Attribute(.indexed) var size: Int = 0
    @Attribute(.indexed, originalName: "size") var dimension: Int = 0
    var label: String = "plain"
}
