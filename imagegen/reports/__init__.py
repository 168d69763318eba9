"""What users read: the image listing as a table, JSON or a GitHub Actions matrix (listing) and the report
page of build, test and push results (page). It may import every package but imagegen.cli."""
