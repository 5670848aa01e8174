"""Analysis over PerfDB: leaderboard index, recommender, comparisons, exports and chart data."""
