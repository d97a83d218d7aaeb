"""Framework integrations: ``hookline.contrib.django`` (an installable Django app) and
``hookline.contrib.flask`` (a Flask extension). Each imports its framework, so import only the one
your application uses."""
