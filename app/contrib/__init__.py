"""Framework integrations: ``app.contrib.django`` (an installable Django app) and
``app.contrib.flask`` (a Flask extension). Each imports its framework, so import only the one
your application uses."""
