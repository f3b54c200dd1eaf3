-- herald's cluster schema, version 4: the directory's version. Every change of what each node
-- keeps in memory (endpoints, plans) adds one to it in the change's own transaction, so a node
-- can tell that its copy misses a change committed before a request began: ingest writes only
-- while the version is the one its copy reflects, and reads reload a copy that is behind.
CREATE TABLE directory_version (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint  NOT NULL
);
INSERT INTO directory_version (one, version) VALUES (true, 0);
