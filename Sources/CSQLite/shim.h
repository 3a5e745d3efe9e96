#include <sqlite3.h>

// `sqlite3_db_config` is variadic, which Swift cannot call: one wrapper per option we use.

/// Sets or clears SQLITE_DBCONFIG_RESET_DATABASE (see `Connection.eraseDatabase()`).
static inline int cs_sqlite3_set_reset_database(sqlite3 *db, int on) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_RESET_DATABASE, on, (int *)0);
}
