-- Usage export (docs/metering.md): how far each configured sink's periods were exported.
-- A round of the exporter reads its sink's row and moves it on in the transaction that
-- writes the periods' events into the webhook outbox, so each period goes out once,
-- whichever instance exports it.
CREATE TABLE usage_export_marks (
    sink TEXT PRIMARY KEY NOT NULL,
    -- Every period that ends at or before this (unix ms) has been written out.
    exported_until BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
