DROP TABLE usage_export_marks;
