-- Table releases and labels (issue 11). A table release stores its rows row-major in
-- `distribution` (so `dimension` is rows × cells) and its row count in `table_rows`; a vector
-- release has `table_rows` NULL, so releases stored before this migration read back unchanged.
-- `label` is the client's free text (1 to 200 characters, checked again by the service).

ALTER TABLE releases ADD COLUMN table_rows BIGINT;
ALTER TABLE releases ADD COLUMN label TEXT;
ALTER TABLE releases ADD CONSTRAINT releases_table_rows_divide
    CHECK (table_rows IS NULL OR (table_rows >= 1 AND dimension >= table_rows AND dimension % table_rows = 0));
ALTER TABLE releases ADD CONSTRAINT releases_label_length
    CHECK (label IS NULL OR char_length(label) BETWEEN 1 AND 200);
